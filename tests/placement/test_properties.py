"""Properties that hold for every decision of every policy, on random requests."""

import itertools
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from cnbrain.domain.decision import Decision, DecisionStatus, SegmentKind
from cnbrain.domain.enums import SiteKind
from cnbrain.domain.request import PlacementRequest
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.synthetic import synthetic_document
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.registry import STRATEGIES

SMALL_SYNTHETIC = ComputeNetworkMap.from_document(
    synthetic_document(provinces=5, sites_per_province=8, seed=11)
)


@st.composite
def requests(draw: st.DrawFn, cmap: ComputeNetworkMap) -> PlacementRequest:
    models = [*cmap.accelerator_models, None]
    model = draw(st.sampled_from(models))
    resources: dict[str, Any] = {
        "cpu": draw(st.sampled_from([0.5, 2.0, 16.0, 64.0, 300.0])),
        "memory_gib": draw(st.sampled_from([1.0, 32.0, 256.0, 2048.0])),
    }
    if model is not None:
        resources["accelerator"] = {"model": model, "count": draw(st.integers(1, 24))}
    constraints: dict[str, Any] = {
        "min_bandwidth_gbps": draw(st.sampled_from([0.0, 1.0, 10.0, 45.0, 120.0])),
    }
    if draw(st.booleans()):
        constraints["max_latency_ms"] = draw(st.sampled_from([1.0, 4.0, 10.0, 30.0]))
    if draw(st.booleans()):
        constraints["regions_denied"] = [draw(st.sampled_from(list(cmap.province_codes)))]
    return PlacementRequest.model_validate(
        {
            "source_province": draw(st.sampled_from(list(cmap.province_codes))),
            "resources": resources,
            "constraints": constraints,
            "duration_hours": draw(st.sampled_from([0.5, 4.0, 48.0])),
            "priority": draw(st.integers(0, 9)),
            "national_optimum": draw(st.booleans()),
            "objective": {
                k: draw(st.sampled_from([0.0, 0.5, 1.0, 3.0]))
                for k in ("cost", "latency", "energy", "balance")
            },
        }
    )


def check(decision: Decision, request: PlacementRequest, cmap: ComputeNetworkMap) -> None:
    assert decision.request_id == request.id
    if decision.status is DecisionStatus.REJECTED:
        assert decision.reason
        return
    assert decision.site is not None and decision.path is not None
    site = cmap.site(decision.site)
    source = request.source_province
    if site.province != source:
        assert site.kind is SiteKind.HUB, f"{site.id} ({site.kind}) serves a request from {source}"
    if site.kind is SiteKind.IDLE:
        assert site.province == source
    denied = set(request.constraints.regions_denied)
    assert site.province not in denied and cmap.region_of(site.province) not in denied
    bound = request.constraints.max_latency_ms
    if bound is not None:
        assert decision.path.latency_ms <= bound + 1e-9
    hops = [h for s in decision.path.segments for h in s.hops]
    access = request.access_node or cmap.provinces[source].access_nodes[0]
    assert hops[0].from_node == access and hops[-1].to_node == site.id
    assert all(a.to_node == b.from_node for a, b in itertools.pairwise(hops))
    assert not any(h.to_node in cmap.site_index for h in hops[:-1]), "a path passes through a site"
    assert len({h.link for h in hops}) == len(hops)
    need = request.constraints.min_bandwidth_gbps
    assert all(h.residual_gbps >= need for h in hops)
    kinds = [s.kind for s in decision.path.segments]
    if site.province == source:
        assert kinds == [SegmentKind.LOCAL]
    else:
        assert kinds == [SegmentKind.SOURCE, SegmentKind.BACKBONE, SegmentKind.DESTINATION]


@pytest.mark.parametrize("policy", list(STRATEGIES))
@pytest.mark.parametrize("cmap_name", ["tiny", "synthetic"])
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_no_decision_breaks_a_rule(
    tiny_map: ComputeNetworkMap, policy: str, cmap_name: str, data: st.DataObject
) -> None:
    cmap = tiny_map if cmap_name == "tiny" else SMALL_SYNTHETIC
    engine = PlacementEngine(cmap)
    batch = data.draw(st.lists(requests(cmap), min_size=1, max_size=12))
    batch = [r.model_copy(update={"id": f"r{i}"}) for i, r in enumerate(batch)]
    split = data.draw(st.integers(0, len(batch)))
    decisions = [engine.place(r, policy=policy) for r in batch[:split]]
    decisions += engine.place_batch(batch[split:], policy=policy)
    for decision, request in zip(decisions, batch, strict=True):
        check(decision, request, cmap)
    engine.ledger.check_invariants()
    held = {d.reservation_id for d in decisions if d.reservation_id}
    assert held == set(engine.ledger.reservations)
    for reservation_id in held:
        engine.release(reservation_id)
    engine.ledger.check_invariants()
    snapshot = engine.ledger.snapshot()
    assert (snapshot.free_cpu_m == engine.arrays.cap_cpu_m).all()
    assert (snapshot.residual_mbps == engine.arrays.link_cap_mbps).all()
