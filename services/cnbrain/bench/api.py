"""`cnbrain bench api`: submissions per second and latency against a running brain.

Makes a tenant and a user (with the admin or operator key given), then sends `requests`
submissions with `concurrency` in flight: small CPU jobs and some single-accelerator
inference jobs from the map's provinces. Afterwards it cancels what it placed (as many in
flight), so the benchmark leaves the brain as it found it.

The timed submissions go through `_Connection`, a bare HTTP/1.1 keep-alive client (one
connection per request in flight) rather than httpx: the benchmark usually shares the machine
with the brain, and a general-purpose client's own CPU time (about 3 ms per request) would be
taken from the brain being measured. Set-up calls use httpx.
"""

import asyncio
import contextlib
import json
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np


@dataclass(frozen=True, slots=True)
class ApiFigures:
    requests: int
    concurrency: int
    seconds: float
    submissions_per_s: float
    p50_ms: float
    p99_ms: float
    placed: int
    rejected: int
    errors: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class HttpError(Exception):
    """The brain's answer could not be read as HTTP/1.1."""


class _Connection:
    """One keep-alive HTTP/1.1 connection to the brain, for one request at a time.

    Enough for the brain's JSON API: bodies are sent with Content-Length, and answers are read
    by Content-Length or chunked encoding. It reconnects when the server closed the connection
    between requests.
    """

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self._host, self._port = host, port
        self._head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": host, **headers}.items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, body: bytes = b"", *, retry: bool = True
    ) -> tuple[int, bytes]:
        """Send one request; the status and body of the answer. When the server had closed
        the idle connection (no answer at all), the request is sent once more on a new one."""
        if self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
        reader, writer = self._reader, self._writer
        assert reader is not None
        length = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        writer.write(f"{method} {path} HTTP/1.1\r\n{self._head}{length}\r\n".encode() + body)
        status_line = await reader.readline()
        if not status_line:
            await self.close()
            if retry:
                return await self.request(method, path, body, retry=False)
            raise HttpError(f"{method} {path}: the connection closed without an answer")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise HttpError(f"not an HTTP answer: {status_line!r}")
        headers: dict[bytes, bytes] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            chunks = []
            while size := int((await reader.readline()).split(b";")[0], 16):
                chunks.append(await reader.readexactly(size))
                await reader.readline()
            await reader.readline()
            content = b"".join(chunks)
        else:
            content = await reader.readexactly(int(headers.get(b"content-length", b"0")))
        if headers.get(b"connection", b"").lower() == b"close":
            await self.close()
        return int(parts[1]), content

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
            self._reader = self._writer = None


def _bodies(sites: list[dict[str, Any]], count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    provinces = sorted({s["province"] for s in sites})
    models = sorted({m for s in sites for m, n in s["capacity"]["accelerators"].items() if n > 0})
    bodies = []
    for _ in range(count):
        body: dict[str, Any] = {
            "source_province": rng.choice(provinces),
            "resources": {
                "cpu": float(rng.choice([1, 2, 4])),
                "memory_gib": float(rng.choice([2, 4, 8])),
            },
            "duration_hours": float(rng.choice([1, 4])),
            "workload_class": "batch",
        }
        if models and rng.random() < 0.3:
            body["resources"]["accelerator"] = {"model": rng.choice(models), "count": 1}
            body["workload_class"] = "inference"
            body["constraints"] = {"max_latency_ms": 40.0, "min_bandwidth_gbps": 0.1}
        bodies.append(body)
    return bodies


async def _in_flight(
    connections: list[_Connection], calls: Iterator[tuple[str, str, bytes]]
) -> list[tuple[float, int, bytes]]:
    """Make `calls` (method, path, body) with one call in flight per connection; for each,
    in the order answered: (latency in ms, status, body)."""
    results: list[tuple[float, int, bytes]] = []

    async def worker(connection: _Connection) -> None:
        for method, path, body in calls:
            start = time.perf_counter()
            status, content = await connection.request(method, path, body)
            results.append(((time.perf_counter() - start) * 1000, status, content))

    await asyncio.gather(*(worker(c) for c in connections))
    return results


async def bench_api(
    *, url: str, staff_token: str, requests: int, concurrency: int, seed: int
) -> ApiFigures:
    staff = {"Authorization": f"Bearer {staff_token}"}
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        sites = (await client.get("/v1/sites", headers=staff)).raise_for_status().json()
        (
            await client.post("/v1/tenants", json={"id": tenant, "name": tenant}, headers=staff)
        ).raise_for_status()
        user = (
            (
                await client.post(
                    "/v1/users",
                    json={"name": "bench", "role": "tenant-user", "tenant": tenant},
                    headers=staff,
                )
            )
            .raise_for_status()
            .json()
        )
        key = (
            (await client.post(f"/v1/users/{user['id']}/api-keys", headers=staff))
            .raise_for_status()
            .json()
        )
    target = urlsplit(url)
    prefix = target.path.rstrip("/")
    auth = {"Authorization": f"Bearer {key['token']}"}
    connections = [
        _Connection(target.hostname or "127.0.0.1", target.port or 80, auth)
        for _ in range(concurrency)
    ]
    try:
        bodies = [json.dumps(b).encode() for b in _bodies(sites, requests, seed)]
        start = time.perf_counter()
        answers = await _in_flight(
            connections, iter([("POST", f"{prefix}/v1/requests", b) for b in bodies])
        )
        seconds = time.perf_counter() - start
        outcomes = [json.loads(body) if status == 201 else None for _, status, body in answers]
        placed = [o["id"] for o in outcomes if o is not None and o["state"] == "placed"]
        await _in_flight(
            connections, iter([("POST", f"{prefix}/v1/requests/{i}/cancel", b"") for i in placed])
        )
    finally:
        for connection in connections:
            await connection.close()
    latencies = [ms for ms, _, _ in answers]
    return ApiFigures(
        requests=requests,
        concurrency=concurrency,
        seconds=seconds,
        submissions_per_s=requests / seconds,
        p50_ms=float(np.percentile(latencies, 50)),
        p99_ms=float(np.percentile(latencies, 99)),
        placed=len(placed),
        rejected=sum(1 for o in outcomes if o is not None and o["state"] == "rejected"),
        errors=sum(1 for o in outcomes if o is None),
    )
