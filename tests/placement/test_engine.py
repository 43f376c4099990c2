"""The placement engine end to end on the tiny map: decisions, policy rules, batches, ledger."""

import itertools

import numpy as np
import pytest

from cnbrain.bench.workload import random_requests
from cnbrain.domain.decision import DecisionStatus, SegmentKind
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.load import load_map
from cnbrain.netmap.synthetic import synthetic_document
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.registry import STRATEGIES, EngineConfig
from cnbrain.placement.solver import SolverSettings
from tests.tiny_map import request

GPU8_IB = {
    "resources": {"cpu": 8, "memory_gib": 64, "accelerator": {"model": "A100", "count": 8}},
    "constraints": {"interconnect": "ib"},
    "objective": {"cost": 0, "latency": 1, "energy": 0, "balance": 0},
}


def test_cross_region_placement_has_three_segments_by_three_owners(
    tiny_map: ComputeNetworkMap,
) -> None:
    engine = PlacementEngine(tiny_map)
    decision = engine.place(
        request(
            resources={
                "cpu": 8,
                "memory_gib": 64,
                "accelerator": {"model": "Ascend910B", "count": 4},
            },
            constraints={"min_bandwidth_gbps": 10, "max_latency_ms": 20},
        )
    )
    assert decision.status is DecisionStatus.PLACED
    assert decision.site == "CC-hub"
    assert decision.path is not None
    kinds = [s.kind for s in decision.path.segments]
    assert kinds == [SegmentKind.SOURCE, SegmentKind.BACKBONE, SegmentKind.DESTINATION]
    assert [s.owner for s in decision.path.segments] == ["east", "national", "west"]
    hops = [h for s in decision.path.segments for h in s.hops]
    assert hops[0].from_node == "AA-acc" and hops[-1].to_node == "CC-hub"
    assert all(a.to_node == b.from_node for a, b in itertools.pairwise(hops))
    assert len(decision.path.srv6_segment_list) == len(hops)
    assert decision.path.latency_ms == pytest.approx(
        sum(s.latency_ms for s in decision.path.segments)
    )
    assert decision.path.latency_ms == pytest.approx(0.3 + 5.0 + 0.7)
    assert decision.reservation_id is not None
    assert decision.reservation_id in engine.ledger.reservations
    held = engine.ledger.reservations[decision.reservation_id]
    assert held.mbps == 10_000 and len(held.links) == len(hops)


def test_local_first_keeps_a_request_in_its_province(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    green = {"cost": 0, "latency": 0, "energy": 1, "balance": 0}
    local = engine.place(request(source_province="BB", objective=green), reserve=False)
    assert local.province == "BB"
    assert local.explanation is not None and "placed locally" in local.explanation.local_first
    national = engine.place(
        request(source_province="BB", objective=green, national_optimum=True), reserve=False
    )
    assert national.site == "CC-hub"
    assert (
        national.explanation is not None and "national optimum" in national.explanation.local_first
    )


def test_escalates_when_the_province_cannot_serve(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    gpu = {"cpu": 4, "memory_gib": 16, "accelerator": {"model": "A100", "count": 8}}
    decision = engine.place(request(resources=gpu))
    assert decision.site in {"BB-hub", "CC-hub"}
    assert (
        decision.explanation is not None
        and "national hubs were searched" in decision.explanation.local_first
    )


def test_idle_and_provincial_sites_never_serve_other_provinces(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    cheap = {"cost": 1, "latency": 0, "energy": 0, "balance": 0}
    from_aa = engine.place(request(objective=cheap), reserve=False)
    assert from_aa.site == "AA-idle"
    for _ in range(5):
        d = engine.place(request(source_province="CC", objective=cheap, national_optimum=True))
        assert d.site in {"BB-hub", "CC-hub"}


def test_region_deny_list(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    decision = engine.place(
        request(national_optimum=True, constraints={"regions_denied": ["west", "AA"]})
    )
    assert decision.site == "BB-hub"


def test_rejection_names_the_constraint(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    decision = engine.place(
        request(
            resources={"cpu": 1, "memory_gib": 1, "accelerator": {"model": "MLU370", "count": 1}}
        )
    )
    assert decision.status is DecisionStatus.REJECTED
    assert decision.reason is not None and "accelerator_model" in decision.reason
    assert decision.explanation is not None
    assert {r.plugin for r in decision.explanation.rejections} >= {"accelerator_model"}
    assert sum(r.sites for r in decision.explanation.rejections) == len(tiny_map.sites)
    assert engine.ledger.reservations == {}


def test_rejection_when_no_path_has_the_bandwidth(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    decision = engine.place(request(constraints={"min_bandwidth_gbps": 150}))
    assert decision.status is DecisionStatus.REJECTED
    assert decision.reason is not None and "150.0 Gbps" in decision.reason


def test_quote_reserves_nothing_and_release_restores(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    before = engine.ledger.snapshot()
    quote = engine.place(request(constraints={"min_bandwidth_gbps": 5}), reserve=False)
    assert quote.status is DecisionStatus.PLACED and quote.reservation_id is None
    # Brains decide this way too and reserve in their own ledgers: the engine's explanation
    # says nothing of reserving.
    assert quote.explanation is not None and not any(
        "reserved" in n for n in quote.explanation.notes
    )
    assert engine.ledger.version == before.version
    placed = engine.place(request(constraints={"min_bandwidth_gbps": 5}))
    assert placed.reservation_id is not None
    engine.release(placed.reservation_id)
    after = engine.ledger.snapshot()
    for name in ("free_cpu_m", "free_mem_mib", "free_storage_gib", "free_acc", "residual_mbps"):
        assert np.array_equal(getattr(before, name), getattr(after, name)), name


def test_joint_batch_does_not_let_an_early_request_starve_a_later_one(
    tiny_map: ComputeNetworkMap,
) -> None:
    """R1 fits at BB-hub or CC-hub and prefers BB-hub; R2 fits only at BB-hub (x86, 16 A100)."""
    r1 = request(id="r1", **GPU8_IB)
    r2 = request(
        id="r2",
        resources={"cpu": 8, "memory_gib": 64, "accelerator": {"model": "A100", "count": 16}},
        constraints={"interconnect": "ib", "cpu_arch": "x86_64"},
    )
    greedy = PlacementEngine(tiny_map).place_batch([r1, r2], policy="greedy")
    assert [d.status for d in greedy] == [DecisionStatus.PLACED, DecisionStatus.REJECTED]
    joint = PlacementEngine(tiny_map).place_batch([r1, r2])
    assert [(d.request_id, d.site) for d in joint] == [("r1", "CC-hub"), ("r2", "BB-hub")]
    assert PlacementEngine(tiny_map).place(r1).site == "BB-hub"


def test_priority_wins_contended_capacity(tiny_map: ComputeNetworkMap) -> None:
    big = {"cpu": 8, "memory_gib": 64, "accelerator": {"model": "A100", "count": 16}}
    only_bb = {"interconnect": "ib", "cpu_arch": "x86_64"}
    low = request(id="low", resources=big, constraints=only_bb, priority=1)
    high = request(id="high", resources=big, constraints=only_bb, priority=7)
    decisions = PlacementEngine(tiny_map).place_batch([low, high])
    assert [d.status for d in decisions] == [DecisionStatus.REJECTED, DecisionStatus.PLACED]


def test_batch_shares_bandwidth_exactly(tiny_map: ComputeNetworkMap) -> None:
    """Three 60 Gbps requests from AA to other provinces: the two access links carry 100 Gbps
    each, so exactly two can leave AA."""
    engine = PlacementEngine(tiny_map)
    heavy = [
        request(
            id=f"h{i}",
            national_optimum=True,
            constraints={"min_bandwidth_gbps": 60, "regions_denied": ["AA"]},
        )
        for i in range(3)
    ]
    decisions = engine.place_batch(heavy)
    assert sum(d.status is DecisionStatus.PLACED for d in decisions) == 2
    engine.ledger.check_invariants()


@pytest.mark.parametrize("policy", list(STRATEGIES))
def test_every_policy_places_and_keeps_the_ledger_consistent(
    tiny_map: ComputeNetworkMap, policy: str
) -> None:
    engine = PlacementEngine(tiny_map)
    requests = [
        request(id=f"p{i}", source_province=p, resources={"cpu": 16, "memory_gib": 64})
        for i, p in enumerate(["AA", "BB", "CC", "AA", "BB"])
    ]
    decisions = engine.place_batch(requests, policy=policy)
    assert [d.request_id for d in decisions] == [r.id for r in requests]
    assert all(d.status is DecisionStatus.PLACED and d.policy == policy for d in decisions)
    assert len(engine.ledger.reservations) == 5
    engine.ledger.check_invariants()


def test_exact_model_is_the_minimum_over_every_option(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    req = request(national_optimum=True, constraints={"min_bandwidth_gbps": 1})
    exact = engine.place(req, policy="exact", reserve=False)
    wide = PlacementEngine(tiny_map, config=EngineConfig(top_n=len(tiny_map.sites)))
    assert wide.place(req, reserve=False).outcome == exact.outcome

    def objective_within(province: str) -> float:
        constraints = req.constraints.model_copy(update={"regions_allowed": (province,)})
        within = req.model_copy(update={"constraints": constraints})
        outcome = engine.place(within, policy="exact", reserve=False).outcome
        assert outcome is not None
        return outcome.objective

    best = min(
        objective_within(site.province)
        for site in tiny_map.sites
        if site.kind == "hub" or site.province == "AA"
    )
    assert exact.outcome is not None and exact.outcome.objective == pytest.approx(best)


def test_explanation_lists_candidates_best_first(tiny_map: ComputeNetworkMap) -> None:
    decision = PlacementEngine(tiny_map).place(request(national_optimum=True))
    assert decision.explanation is not None
    scores = [c.score for c in decision.explanation.candidates]
    assert scores == sorted(scores) and len(scores) == 4
    assert decision.explanation.solver_status == "OPTIMAL" and decision.explanation.optimal
    assert set(decision.explanation.timings_ms) >= {"filter", "score", "top_n", "route", "solve"}


def test_time_limit_is_reported_and_the_answer_stays_feasible() -> None:
    cmap = ComputeNetworkMap.from_document(
        synthetic_document(provinces=6, sites_per_province=10, seed=1)
    )
    config = EngineConfig(solver=SolverSettings(time_limit_s=0.0), batch_chunk=200)
    engine = PlacementEngine(cmap, config=config)
    decisions = engine.place_batch(random_requests(cmap, count=400, seed=7))
    placed = [d for d in decisions if d.status is DecisionStatus.PLACED]
    assert placed
    for decision in decisions:
        assert decision.explanation is not None
        assert not decision.explanation.optimal
        assert any("time limit" in note for note in decision.explanation.notes)
    engine.ledger.check_invariants()


def test_decide_on_a_given_snapshot_then_reserve_elsewhere(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    req = request(
        resources={"cpu": 8, "memory_gib": 64, "accelerator": {"model": "A100", "count": 2}},
        constraints={"min_bandwidth_gbps": 10},
        national_optimum=True,
    )
    snapshot = engine.ledger.snapshot()
    with pytest.raises(ValueError, match="cannot reserve"):
        engine.place(req, snapshot=snapshot)
    decision = engine.place(req, reserve=False, snapshot=snapshot)
    assert decision.status is DecisionStatus.PLACED and decision.path is not None
    reservation = engine.reservation_for(req, decision)
    assert tiny_map.sites[reservation.compute.site].id == decision.site
    assert reservation.compute.cpu_m == 8000 and reservation.compute.acc_milli == 2000
    assert reservation.mbps == 10_000
    hops = [h.link for s in decision.path.segments for h in s.hops]
    assert [tiny_map.links[i].id for i in reservation.links] == hops
    engine.ledger.reserve(reservation)
    engine.ledger.check_invariants()


def test_ranking_many_requests_at_once_equals_ranking_each_alone() -> None:
    """On the built-in map, with some capacity taken, `rank_sites_many` gives every request of
    a mix (training, inference, service, batch jobs from every province; some that nothing
    can take) exactly the ranking and reason `rank_sites` gives it alone."""
    cmap = load_map("china")
    engine = PlacementEngine(cmap)
    taken = engine.place_batch(random_requests(cmap, count=150, seed=3))
    assert any(d.status is DecisionStatus.PLACED for d in taken)
    snapshot = engine.ledger.snapshot()
    mix = [
        *random_requests(cmap, count=120, seed=11),
        request(
            id="too-big",
            source_province=cmap.province_codes[0],
            resources={"cpu": 100_000, "memory_gib": 64},
        ),
        request(
            id="no-such-model-count",
            source_province=cmap.province_codes[1],
            resources={"cpu": 4, "memory_gib": 8, "accelerator": {"model": "A100", "count": 4096}},
            national_optimum=True,
        ),
        request(
            id="near-only",
            source_province=cmap.province_codes[2],
            constraints={"max_latency_ms": 0.01},
            national_optimum=True,
        ),
    ]
    for n in (1, 6, 40):
        together = engine.rank_sites_many(mix, snapshot=snapshot, n=n)
        alone = [engine.rank_sites(r, snapshot=snapshot, n=n) for r in mix]
        assert together == alone
        assert len(together) == len(mix)
        assert any(ranked for ranked, _ in together)
        assert any(not ranked and reason for ranked, reason in together)
        assert all(len(ranked) <= n for ranked, _ in together)
    # A batch in another order gives each request the same answer.
    reordered = engine.rank_sites_many(mix[::-1], snapshot=snapshot, n=6)
    assert reordered[::-1] == engine.rank_sites_many(mix, snapshot=snapshot, n=6)
    assert engine.rank_sites_many([], snapshot=snapshot, n=3) == []


def test_local_first_is_a_selection_policy_that_can_be_turned_off(
    tiny_map: ComputeNetworkMap,
) -> None:
    cheap = {"cost": 1, "latency": 0, "energy": 0, "balance": 0}
    gpu = {"cpu": 2, "memory_gib": 8, "accelerator": {"model": "A100", "count": 2}}
    local = PlacementEngine(tiny_map).place(request(resources=gpu, objective=cheap))
    assert local.site == "AA-dc"
    assert local.explanation is not None and "placed locally" in local.explanation.local_first

    engine = PlacementEngine(tiny_map, config=EngineConfig(selection="nationwide"))
    remote = engine.place(request(resources=gpu, objective=cheap))
    assert remote.site == "CC-hub"
    assert local.outcome is not None and remote.outcome is not None
    assert remote.outcome.cost_cny < local.outcome.cost_cny
    assert remote.explanation is not None
    assert remote.explanation.local_first == "local-first is off: every province was searched"


def test_an_unknown_selection_policy_is_refused(tiny_map: ComputeNetworkMap) -> None:
    with pytest.raises(KeyError, match="unknown selection 'nowhere'; known: local-first"):
        PlacementEngine(tiny_map, config=EngineConfig(selection="nowhere"))
