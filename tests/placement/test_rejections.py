"""Filter rejections say why: each carries its code, its plugin and a message with amounts;
"not now" (capacity) is told from "never" (everything else)."""

from cnbrain.domain.decision import Decision, DecisionStatus, Rejection
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.framework import Code
from cnbrain.placement.registry import FILTERS
from tests.tiny_map import request


def rejections(decision: Decision) -> dict[str, Rejection]:
    assert decision.explanation is not None
    return {r.plugin: r for r in decision.explanation.rejections}


def a100(count: int) -> dict[str, object]:
    return {"cpu": 4, "memory_gib": 16, "accelerator": {"model": "A100", "count": count}}


def test_the_status_set_is_closed_and_only_capacity_and_free_nodes_are_not_now() -> None:
    assert [c.value for c in Code] == [
        "success",
        "unschedulable",
        "unschedulable_and_unresolvable",
    ]
    codes = {name: factory().code for name, factory in FILTERS.items()}
    assert codes.pop("capacity") is Code.UNSCHEDULABLE
    assert codes.pop("node_pools") is Code.UNSCHEDULABLE
    assert set(codes.values()) == {Code.UNRESOLVABLE}


def test_capacity_rejection_names_what_is_wanted_and_what_is_free(
    tiny_map: ComputeNetworkMap,
) -> None:
    engine = PlacementEngine(tiny_map)
    decision = engine.place(request(resources=a100(40), national_optimum=True))
    assert decision.status is DecisionStatus.REJECTED
    capacity = rejections(decision)["capacity"]
    assert capacity.code == "unschedulable"
    assert capacity.sites == 3
    assert capacity.message == "wants 40 A100, at most 32 free (CC-hub)"
    assert "wants 40 A100, at most 32 free (CC-hub); 3 sites, capacity" in (decision.reason or "")

    one = engine.place(request(resources=a100(20), constraints={"regions_allowed": ["AA"]}))
    assert rejections(one)["capacity"].message == "wants 20 A100, 4 free at AA-dc"

    cpu = engine.place(
        request(resources={"cpu": 100, "memory_gib": 600}, constraints={"regions_allowed": ["AA"]})
    )
    assert rejections(cpu)["capacity"].message == (
        "wants 100 CPU cores, at most 64 free (AA-dc); "
        "wants 600 GiB memory, at most 512 free (AA-dc)"
    )


def test_latency_rejection_names_the_best_path_and_the_bound(
    tiny_map: ComputeNetworkMap,
) -> None:
    engine = PlacementEngine(tiny_map)
    # From AA the best paths are 0.8 ms to AA's sites, 3.0 ms to BB's, 6.0 ms to CC-hub.
    both = engine.place(
        request(national_optimum=True, constraints={"max_latency_ms": 2.5}), reserve=False
    )
    latency = rejections(both)["latency_bound"]
    assert (latency.code, latency.sites) == ("unschedulable_and_unresolvable", 2)
    assert latency.message == "best path 3.0 ms > bound 2.5 ms at the closest, BB-hub"

    one = engine.place(
        request(constraints={"max_latency_ms": 2.5, "regions_allowed": ["BB"]}), reserve=False
    )
    assert one.status is DecisionStatus.REJECTED
    assert rejections(one)["latency_bound"].message == "best path 3.0 ms > bound 2.5 ms at BB-hub"


def test_a_never_site_is_told_from_a_not_now_site(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    only_aa = {"regions_allowed": ["AA"]}
    first = engine.place(request(resources=a100(4), constraints=only_aa))
    assert first.site == "AA-dc" and first.reservation_id is not None

    second = engine.place(request(resources=a100(4), constraints=only_aa))
    assert second.status is DecisionStatus.REJECTED
    found = rejections(second)
    assert (found["regions"].code, found["regions"].sites) == ("unschedulable_and_unresolvable", 3)
    assert found["regions"].message == "allowed: AA"
    never = found["accelerator_model"]
    assert (never.code, never.sites) == ("unschedulable_and_unresolvable", 1)
    assert never.message == "wants 4 A100, none of that model there"
    not_now = found["capacity"]
    assert (not_now.code, not_now.sites) == ("unschedulable", 1)
    assert not_now.message == "wants 4 A100, 0 free at AA-dc"

    engine.release(first.reservation_id)
    assert engine.place(request(resources=a100(4), constraints=only_aa)).site == "AA-dc"


def test_every_constraint_explains_itself(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    decision = engine.place(
        request(
            source_province="BB",
            constraints={"cpu_arch": "x86_64", "interconnect": "ib", "labels": {"tier": "gold"}},
        ),
        reserve=False,
    )
    messages = {plugin: r.message for plugin, r in rejections(decision).items()}
    assert messages == {
        "idle_in_province": "from BB: idle sites of other provinces",
        "hub_across_provinces": "from BB: non-hub sites of other provinces",
        "cpu_arch": "wants x86_64",
        "interconnect": "wants ib, at best ethernet at BB-dc",
        "labels": "wants tier=gold",
    }
