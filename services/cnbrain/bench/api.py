"""`cnbrain bench api`: submissions per second and latency against a running brain.

Makes a tenant and a user (with the admin or operator key given), then sends `requests`
submissions with `concurrency` in flight: small CPU jobs and some single-accelerator
inference jobs from the map's provinces. Afterwards it cancels what it placed (as many in
flight), so the benchmark leaves the brain as it found it.

The timed submissions go through `cnbrain.bench.http` (a bare HTTP/1.1 keep-alive client, one
connection per request in flight) rather than httpx: the benchmark usually shares the machine
with the brain, and a general-purpose client's own CPU time (about 3 ms per request) would be
taken from the brain being measured. Set-up calls use httpx.
"""

import json
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import numpy as np

from cnbrain.bench.http import connections_to, in_flight
from cnbrain.bench.tenants import bench_tenant


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


async def bench_api(
    *, url: str, staff_token: str, requests: int, concurrency: int, seed: int
) -> ApiFigures:
    staff = {"Authorization": f"Bearer {staff_token}"}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        sites = (await client.get("/v1/sites", headers=staff)).raise_for_status().json()
        _, token = await bench_tenant(client, staff)
    auth = {"Authorization": f"Bearer {token}"}
    connections, prefix = connections_to(url, auth, concurrency)
    try:
        bodies = [json.dumps(b).encode() for b in _bodies(sites, requests, seed)]
        start = time.perf_counter()
        answers = await in_flight(
            connections, iter([("POST", f"{prefix}/v1/requests", b) for b in bodies])
        )
        seconds = time.perf_counter() - start
        outcomes = [json.loads(body) if status == 201 else None for _, status, body in answers]
        placed = [o["id"] for o in outcomes if o is not None and o["state"] == "placed"]
        await in_flight(
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
