"""A small hand-built map whose right answers can be worked out by hand, and helpers over it.

Provinces AA and BB form region `east`, CC region `west`. Backbone: AA-gw - BB-gw (2 ms),
BB-gw - CC-gw (3 ms), AA-gw - CC-gw (10 ms). Inside each province: the gateway, two
aggregation nodes and one access node; every site is dual-homed to both aggregation nodes.

Sites:
- AA-dc   provincial, AA, 64 cores, 4 x A100, expensive, PUE 1.5
- AA-idle idle,       AA, 32 cores
- BB-hub  hub,        BB, 512 cores, 16 x A100, ib, PUE 1.3
- BB-dc   provincial, BB, 128 cores, 8 x A100 (not a hub: others may not use it)
- CC-hub  hub,        CC, 1024 cores, 32 x A100 + 16 x Ascend910B, ib, aarch64, cheap, PUE 1.15
"""

from collections.abc import Sequence
from typing import Any

from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.batch import RequestBatch
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.registry import SCORES
from cnbrain.placement.weights import WeightMatrix
from cnbrain.routing.router import SegmentRouter


def _province(
    code: str, region: str, lat: float, lon: float
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    province = {
        "code": code,
        "name": code,
        "region": region,
        "gateway": f"{code}-gw",
        "access_nodes": [f"{code}-acc"],
        "lat": lat,
        "lon": lon,
    }
    nodes = [
        {"id": f"{code}-gw", "role": "gateway", "province": code, "lat": lat, "lon": lon},
        {"id": f"{code}-agg1", "role": "aggregation", "province": code, "lat": lat, "lon": lon},
        {"id": f"{code}-agg2", "role": "aggregation", "province": code, "lat": lat, "lon": lon},
        {"id": f"{code}-acc", "role": "access", "province": code, "lat": lat, "lon": lon},
    ]
    links = [
        _link(f"{code}-gw", f"{code}-agg1", "province", 400, 0.5),
        _link(f"{code}-gw", f"{code}-agg2", "province", 400, 0.8),
        _link(f"{code}-agg1", f"{code}-agg2", "province", 400, 0.4),
        _link(f"{code}-acc", f"{code}-gw", "access", 100, 0.3),
        _link(f"{code}-acc", f"{code}-agg1", "access", 100, 0.6),
    ]
    return province, nodes, links


def _link(a: str, b: str, layer: str, gbps: float, ms: float, cost: float = 0.01) -> dict[str, Any]:
    return {
        "a": a,
        "b": b,
        "layer": layer,
        "bandwidth_gbps": gbps,
        "latency_ms": ms,
        "cost_per_gbps_hour": cost,
    }


def _site(
    site_id: str,
    province: str,
    kind: str,
    *,
    cores: float,
    memory: float,
    accelerators: dict[str, int] | None = None,
    price_core: float = 0.05,
    price_acc: float = 10.0,
    pue: float = 1.4,
    carbon: float = 500.0,
    arch: str = "x86_64",
    interconnect: str = "ethernet",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    accelerators = accelerators or {}
    return {
        "id": site_id,
        "province": province,
        "kind": kind,
        "lat": 30.0,
        "lon": 110.0,
        "capacity": {
            "cpu_cores": cores,
            "memory_gib": memory,
            "accelerators": accelerators,
            "storage_gib": 10000,
        },
        "cpu_arch": arch,
        "interconnect": interconnect,
        "prices": {
            "cpu_core_hour": price_core,
            "memory_gib_hour": 0.005,
            "accelerator_hour": dict.fromkeys(accelerators, price_acc),
            "storage_gib_hour": 0.0001,
        },
        "pue": pue,
        "carbon_g_per_kwh": carbon,
        "labels": labels or {},
    }


def tiny_map_raw() -> dict[str, Any]:
    provinces, nodes, links = [], [], []
    for code, region, lat, lon in (
        ("AA", "east", 31.0, 121.0),
        ("BB", "east", 30.0, 114.0),
        ("CC", "west", 38.0, 106.0),
    ):
        p, n, ln = _province(code, region, lat, lon)
        provinces.append(p)
        nodes.extend(n)
        links.extend(ln)
    links += [
        _link("AA-gw", "BB-gw", "backbone", 400, 2.0, 0.02),
        _link("BB-gw", "CC-gw", "backbone", 400, 3.0, 0.02),
        _link("AA-gw", "CC-gw", "backbone", 100, 10.0, 0.05),
    ]
    sites = [
        _site(
            "AA-dc",
            "AA",
            "provincial",
            cores=64,
            memory=512,
            accelerators={"A100": 4},
            price_core=0.12,
            price_acc=14.0,
            pue=1.5,
            carbon=600,
            labels={"tier": "gold"},
        ),
        _site("AA-idle", "AA", "idle", cores=32, memory=128, price_core=0.02, pue=1.7, carbon=650),
        _site(
            "BB-hub",
            "BB",
            "hub",
            cores=512,
            memory=4096,
            accelerators={"A100": 16},
            price_core=0.06,
            price_acc=11.0,
            pue=1.3,
            carbon=550,
            interconnect="ib",
        ),
        _site(
            "BB-dc",
            "BB",
            "provincial",
            cores=128,
            memory=1024,
            accelerators={"A100": 8},
            price_core=0.03,
            price_acc=6.0,
            pue=1.3,
            carbon=500,
        ),
        _site(
            "CC-hub",
            "CC",
            "hub",
            cores=1024,
            memory=8192,
            accelerators={"A100": 32, "Ascend910B": 16},
            price_core=0.03,
            price_acc=8.0,
            pue=1.15,
            carbon=300,
            arch="aarch64",
            interconnect="ib",
        ),
    ]
    for site in sites:
        code = site["province"]
        links.append(_link(site["id"], f"{code}-agg1", "province", 100, 0.2))
        links.append(_link(site["id"], f"{code}-agg2", "province", 100, 0.3))
    return {
        "name": "tiny",
        "regions": [{"id": "east"}, {"id": "west"}],
        "provinces": provinces,
        "nodes": nodes,
        "sites": sites,
        "links": links,
    }


def request(**overrides: Any) -> PlacementRequest:
    """A small CPU request from AA, with `overrides` applied to the raw JSON."""
    raw: dict[str, Any] = {
        "source_province": "AA",
        "resources": {"cpu": 4, "memory_gib": 16},
        "duration_hours": 2,
    }
    for key, value in overrides.items():
        raw[key] = value
    return PlacementRequest.model_validate(raw)


def ascend_body(count: int, **extra: Any) -> dict[str, Any]:
    """The body of a submission from AA of `count` Ascend910B (only CC-hub has them, 16) for
    an hour, with `extra` fields."""
    return {
        "source_province": "AA",
        "resources": {
            "cpu": 1,
            "memory_gib": 1,
            "accelerator": {"model": "Ascend910B", "count": count},
        },
        "duration_hours": 1,
        **extra,
    }


def cycle_state(cmap: ComputeNetworkMap, requests: Sequence[PlacementRequest]) -> CycleState:
    """A fresh cycle over an empty ledger of `cmap`."""
    arrays = MapArrays.build(cmap)
    batch = RequestBatch.build(requests, arrays, WeightMatrix())
    return CycleState(
        batch=batch,
        snapshot=Snapshot.empty(arrays),
        router=SegmentRouter(arrays),
        k_paths=3,
        score_plugins=[factory() for factory in SCORES.values()],
    )


def site_ids(cmap: ComputeNetworkMap, mask: Any) -> set[str]:
    return {cmap.sites[i].id for i in range(len(cmap.sites)) if mask[i]}
