"""`cnbrain bench federation`: cross-region decisions per second and their end-to-end latency.

Against a running local federation (`cnbrain up`): makes a tenant with its own API key in
the source brain (`cnbrain.bench.tenants`), then sends `requests` submissions as that tenant
with `concurrency` in flight, each asking for the national optimum, so every one goes source
brain -> national brain -> candidate and segment calls -> joint choice -> prepare and commit
in the owners -> answer. Small single-accelerator jobs from the source brain's provinces, each
for a model that national hub sites of other regions have (outside its own province only hubs
may serve a request), so each can be placed across regions while capacity lasts. It counts
what was placed across regions, what was rejected and what failed (no 201 answer), and
afterwards cancels what it placed.

Timed submissions go through the bare client of `cnbrain.bench.http` (see there why).
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
from cnbrain.netmap.compute_map import ComputeNetworkMap


@dataclass(frozen=True, slots=True)
class FederationFigures:
    requests: int
    concurrency: int
    seconds: float
    cross_region_decisions_per_s: float
    answers_per_s: float
    """Every answer (placed, rejected or failed) per second."""
    p50_ms: float
    p99_ms: float
    placed_cross_region: int
    placed_in_region: int
    rejected: int
    errors: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def cross_region_bodies(
    cmap: ComputeNetworkMap,
    sites: list[dict[str, Any]],
    *,
    region: str,
    tenant: str,
    count: int,
    seed: int,
) -> list[dict[str, Any]]:
    """`count` requests from provinces of `region`, each for one accelerator of a model that
    some active national hub site (of `sites`, as the API lists them) outside `region` has."""
    rng = random.Random(seed)
    provinces = sorted(code for code, p in cmap.provinces.items() if p.region == region)
    models = sorted(
        {
            model
            for s in sites
            if s["kind"] == "hub" and cmap.provinces[s["province"]].region != region
            for model, n in s["capacity"]["accelerators"].items()
            if n > 0
        }
    )
    if not provinces or not models:
        raise SystemExit(f"region {region!r} has no provinces, or no other region accelerators")
    return [
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
        for _ in range(count)
    ]


async def bench_federation(
    *,
    url: str,
    staff_token: str,
    map_spec: str,
    requests: int,
    concurrency: int,
    seed: int,
) -> FederationFigures:
    from cnbrain.netmap.load import load_map

    staff = {"Authorization": f"Bearer {staff_token}"}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        health = (await client.get("/readyz")).raise_for_status().json()
        region = health.get("region")
        if not region:
            raise SystemExit(f"{url} is not a regional brain of a federation")
        sites = (await client.get("/v1/sites", headers=staff)).raise_for_status().json()
        tenant, token = await bench_tenant(client, staff)
    bodies = cross_region_bodies(
        load_map(map_spec), sites, region=region, tenant=tenant, count=requests, seed=seed
    )
    auth = {"Authorization": f"Bearer {token}"}
    connections, prefix = connections_to(url, auth, concurrency)
    try:
        calls = [("POST", f"{prefix}/v1/requests", json.dumps(b).encode()) for b in bodies]
        start = time.perf_counter()
        answers = await in_flight(connections, iter(calls))
        seconds = time.perf_counter() - start
        outcomes = [json.loads(body) if status == 201 else None for _, status, body in answers]
        placed = [o for o in outcomes if o is not None and o["state"] == "placed"]
        await in_flight(
            connections,
            iter([("POST", f"{prefix}/v1/requests/{o['id']}/cancel", b"") for o in placed]),
        )
    finally:
        for connection in connections:
            await connection.close()
    cross = [
        o for o in placed if any(s["kind"] == "backbone" for s in o["decision"]["path"]["segments"])
    ]
    latencies = [ms for ms, _, _ in answers]
    return FederationFigures(
        requests=requests,
        concurrency=concurrency,
        seconds=seconds,
        cross_region_decisions_per_s=len(cross) / seconds,
        answers_per_s=len(answers) / seconds,
        p50_ms=float(np.percentile(latencies, 50)),
        p99_ms=float(np.percentile(latencies, 99)),
        placed_cross_region=len(cross),
        placed_in_region=len(placed) - len(cross),
        rejected=sum(1 for o in outcomes if o is not None and o["state"] == "rejected"),
        errors=sum(1 for o in outcomes if o is None),
    )
