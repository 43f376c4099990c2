"""`cnbrain bench federation`: cross-region decisions per second and their end-to-end latency.

Against a running local federation (`cnbrain up`): makes a tenant in the source brain, then
sends `requests` submissions with `concurrency` in flight, each asking for the national
optimum, so every one goes source brain -> national brain -> candidate and segment calls ->
joint choice -> prepare and commit in three owners -> answer. Small single-accelerator jobs
from the source brain's provinces, so capacity lasts. Afterwards it cancels what it placed.
"""

import asyncio
import random
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import numpy as np


@dataclass(frozen=True, slots=True)
class FederationFigures:
    requests: int
    concurrency: int
    seconds: float
    cross_region_decisions_per_s: float
    p50_ms: float
    p99_ms: float
    placed_cross_region: int
    rejected: int
    errors: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


async def bench_federation(
    *,
    url: str,
    staff_token: str,
    map_spec: str,
    requests: int,
    concurrency: int,
    seed: int,
) -> FederationFigures:
    staff = {"Authorization": f"Bearer {staff_token}"}
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        health = (await client.get("/readyz")).raise_for_status().json()
        region = health.get("region")
        if not region:
            raise SystemExit(f"{url} is not a regional brain of a federation")
        sites = (await client.get("/v1/sites", headers=staff)).raise_for_status().json()
        provinces = _own_provinces(map_spec, region)
        (
            await client.post("/v1/tenants", json={"id": tenant, "name": tenant}, headers=staff)
        ).raise_for_status()
        models = sorted(
            {m for s in sites for m, n in s["capacity"]["accelerators"].items() if n > 0}
        )
        bodies = [
            {
                "tenant": tenant,
                "source_province": rng.choice(provinces),
                "resources": {
                    "cpu": 4.0,
                    "memory_gib": 16.0,
                    "accelerator": {"model": rng.choice(models), "count": 1},
                },
                "constraints": {"min_bandwidth_gbps": 0.1},
                "duration_hours": 1.0,
                "workload_class": "inference",
                "national_optimum": True,
            }
            for _ in range(requests)
        ]
        gate = asyncio.Semaphore(concurrency)
        latencies: list[float] = []
        outcomes: list[dict[str, Any] | None] = []

        async def one(body: dict[str, Any]) -> None:
            async with gate:
                start = time.perf_counter()
                answer = await client.post("/v1/requests", json=body, headers=staff)
                latencies.append((time.perf_counter() - start) * 1000)
                outcomes.append(answer.json() if answer.status_code == 201 else None)

        start = time.perf_counter()
        await asyncio.gather(*(one(body) for body in bodies))
        seconds = time.perf_counter() - start
        placed = [o for o in outcomes if o is not None and o["state"] == "placed"]
        cross = [
            o
            for o in placed
            if any(s["kind"] == "backbone" for s in o["decision"]["path"]["segments"])
        ]
        for view in placed:
            await client.post(f"/v1/requests/{view['id']}/cancel", headers=staff)
    return FederationFigures(
        requests=requests,
        concurrency=concurrency,
        seconds=seconds,
        cross_region_decisions_per_s=len(cross) / seconds,
        p50_ms=float(np.percentile(latencies, 50)),
        p99_ms=float(np.percentile(latencies, 99)),
        placed_cross_region=len(cross),
        rejected=sum(1 for o in outcomes if o is not None and o["state"] == "rejected"),
        errors=sum(1 for o in outcomes if o is None),
    )


def _own_provinces(map_spec: str, region: str) -> list[str]:
    from cnbrain.netmap.load import load_map

    cmap = load_map(map_spec)
    return sorted(code for code, p in cmap.provinces.items() if p.region == region)
