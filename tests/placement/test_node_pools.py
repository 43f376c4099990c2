"""Gangs on sites with node pools: a gang fits only where enough nodes have each node's
amounts free, all of it or none, in one batch and across reservations; a shape no pool has
is never placed there, and the rejection says why."""

from typing import Any

import pytest

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.files import parse_map_document
from cnbrain.placement.engine import PlacementEngine
from tests.tiny_map import request, tiny_map_raw

GPU_POOL = {
    "name": "a100",
    "count": 2,
    "cpu_cores": 128,
    "memory_gib": 1024,
    "accelerator": "A100",
    "accelerators": 8,
}
CPU_POOL = {"name": "cpu", "count": 2, "cpu_cores": 128, "memory_gib": 1024}


@pytest.fixture
def pooled() -> ComputeNetworkMap:
    """The tiny map with BB-hub's 16 A100 and 512 cores as two 8-A100 nodes and two CPU nodes
    (the other sites without pools)."""
    raw = tiny_map_raw()
    hub = next(site for site in raw["sites"] if site["id"] == "BB-hub")
    hub["node_pools"] = [GPU_POOL, CPU_POOL]
    return ComputeNetworkMap.from_document(parse_map_document(raw))


def why(decision: Decision) -> str:
    """The rejections of `decision`, one "plugin: reason: message" a line."""
    assert decision.explanation is not None
    return "\n".join(
        f"{r.plugin}: {r.reason}: {r.message}" for r in decision.explanation.rejections
    )


def on_hub(nodes: int, a100: int, **resources: Any) -> Any:
    """A request for `nodes` nodes of `a100` A100 each that only BB-hub can take."""
    accelerator = {"accelerator": {"model": "A100", "count": a100}} if a100 else {}
    return request(
        resources={"cpu": 8, "memory_gib": 64, "nodes": nodes, **accelerator, **resources},
        constraints={"regions_allowed": ["BB"], "labels": {}, "interconnect": "ib"},
    )


def test_a_gang_needs_all_its_nodes_free_at_once(pooled: ComputeNetworkMap) -> None:
    engine = PlacementEngine(pooled)
    first = engine.place(on_hub(1, 8))
    assert first.status is DecisionStatus.PLACED and first.site == "BB-hub"
    # 8 A100 are free, all on one node: a gang of two nodes does not fit.
    second = engine.place(on_hub(2, 1))
    assert second.status is DecisionStatus.REJECTED
    assert "node_pools: no node pool of the site has the request's nodes free" in why(second)
    engine.release(first.reservation_id or "")
    assert engine.place(on_hub(2, 1)).status is DecisionStatus.PLACED


def test_a_gang_is_refused_when_its_nodes_are_split_over_free_devices(
    pooled: ComputeNetworkMap,
) -> None:
    engine = PlacementEngine(pooled)
    assert engine.place(on_hub(1, 6)).site == "BB-hub"
    # 10 A100 are free, but only one node has 4 of them: two nodes of 4 do not fit.
    gang = engine.place(on_hub(2, 4))
    assert gang.status is DecisionStatus.REJECTED
    assert "wants 2 nodes with 4 A100, 8 cores and 64 GiB each; at most 1 such nodes free" in why(
        gang
    )
    assert engine.place(on_hub(1, 4)).site == "BB-hub"


def test_one_batch_does_not_give_the_same_nodes_twice(pooled: ComputeNetworkMap) -> None:
    engine = PlacementEngine(pooled)
    decisions = engine.place_batch([on_hub(1, 6), on_hub(2, 4), on_hub(1, 2)])
    # 16 A100 are enough for all three, but after 6 and 2 on one node only one node is free.
    placed = [d.status is DecisionStatus.PLACED for d in decisions]
    held = engine.ledger.snapshot().nodes[pooled.site_index["BB-hub"]][0]
    assert placed == [True, False, True] and held.nodes_by_free == (1, 0, 0, 0, 0, 0, 0, 0, 1)


def test_a_shape_no_pool_has_is_never_placed_there(pooled: ComputeNetworkMap) -> None:
    engine = PlacementEngine(pooled)
    too_big = engine.place(on_hub(1, 16))
    assert too_big.status is DecisionStatus.REJECTED
    assert (
        "wants 1 node with 16 A100, 8 cores and 64 GiB; nodes of 8 A100 at most, 2 of them"
        in why(too_big)
    )
    assert engine.place(on_hub(3, 8)).status is DecisionStatus.REJECTED
    cpu = engine.place(on_hub(2, 0, cpu=128))
    assert cpu.status is DecisionStatus.PLACED and cpu.site == "BB-hub"
    too_wide = engine.place(on_hub(1, 0, cpu=200))
    assert "nodes of 128 cores at most" in why(too_wide)


def a_share(milli: int) -> Any:
    """A request for `milli` thousandths of one A100, with 1 core and 8 GiB, on BB-hub."""
    return request(
        resources={"cpu": 1, "memory_gib": 8, "accelerator": {"model": "A100", "milli": milli}},
        constraints={"regions_allowed": ["BB"], "labels": {}, "interconnect": "ib"},
    )


def test_fractions_pack_onto_one_accelerator_and_count_their_share(
    pooled: ComputeNetworkMap,
) -> None:
    engine = PlacementEngine(pooled)
    hub, a100 = pooled.site_index["BB-hub"], engine.arrays.accelerator_column["A100"]
    shares = engine.place_batch([a_share(milli) for milli in (500, 300, 200, 600)])
    assert [d.site for d in shares] == ["BB-hub"] * 4
    # 500 + 300 + 200 fill one A100; 600 opens another, which keeps 400 for others.
    held = engine.ledger.snapshot().nodes[hub][0]
    assert held.nodes_by_free == (0,) * 6 + (1, 0, 1) and held.shared_by_free == ((400, 1),)
    assert int(engine.ledger.snapshot().free_acc[hub, a100]) == 16_000 - 1600
    # A share is priced as its part of an accelerator-hour.
    assert shares[0].outcome is not None and shares[1].outcome is not None
    price = pooled.sites[hub].prices.accelerator_hour["A100"] * a_share(1).duration_hours
    assert shares[0].outcome.cost_cny - shares[1].outcome.cost_cny == pytest.approx(0.2 * price)
    # The shares took two A100 of the first node: 6 whole ones are left there, 8 on the other.
    assert engine.place(on_hub(1, 8)).site == "BB-hub"
    assert engine.place(on_hub(1, 7)).status is DecisionStatus.REJECTED
    assert engine.place(on_hub(1, 6)).site == "BB-hub"
    assert engine.place(a_share(400)).site == "BB-hub"
    assert engine.place(a_share(1)).status is DecisionStatus.REJECTED
    assert int(engine.ledger.snapshot().free_acc[hub, a100]) == 0


def pools_on_hub(*pools: tuple[str, int, int]) -> ComputeNetworkMap:
    """The tiny map with BB-hub's A100 as pools of `(name, nodes, A100 a node)`, its A100
    count their total."""
    raw = tiny_map_raw()
    hub = next(site for site in raw["sites"] if site["id"] == "BB-hub")
    hub["capacity"]["accelerators"]["A100"] = sum(count * each for _, count, each in pools)
    hub["node_pools"] = [
        {
            **GPU_POOL,
            "name": name,
            "count": count,
            "accelerators": each,
            "cpu_cores": 32,
            "memory_gib": 256,
        }
        for name, count, each in pools
    ]
    return ComputeNetworkMap.from_document(parse_map_document(raw))


def test_a_gang_goes_to_the_pool_it_fits_best() -> None:
    cmap = pools_on_hub(("eight", 1, 8), ("pair", 4, 2))
    engine = PlacementEngine(cmap)
    assert engine.place(on_hub(1, 2)).site == "BB-hub"  # a node of "pair", not "eight"'s
    eight, pair = engine.ledger.snapshot().nodes[cmap.site_index["BB-hub"]]
    assert eight.nodes_by_free == (0,) * 8 + (1,) and pair.nodes_by_free == (1, 0, 3)
    assert engine.place(on_hub(1, 8)).site == "BB-hub"


def test_a_gang_leaves_what_the_shapes_held_on_the_site_can_use() -> None:
    # A 3 is held. A 2 on a 4-node would leave 2 there, which no 3 can use: it goes to an
    # 8-node and leaves 6. So a 6, an 8 and a 3 still fit; best fit would refuse the 3.
    cmap = pools_on_hub(("eight", 2, 8), ("four", 2, 4))
    engine = PlacementEngine(cmap)
    sizes = [3, 2, 6, 8, 3]
    assert [engine.place(on_hub(1, a100)).site for a100 in sizes] == ["BB-hub"] * 5
    eight, four = engine.ledger.snapshot().nodes[cmap.site_index["BB-hub"]]
    assert eight.nodes_by_free == (2,) + (0,) * 8 and four.nodes_by_free == (0, 2, 0, 0, 0)
    assert eight.held == ((2, 0, 1), (6, 0, 1), (8, 0, 1)) and four.held == ((3, 0, 2),)


def test_a_batch_takes_the_nodes_the_ledger_takes() -> None:
    cmap = pools_on_hub(("eight", 2, 8), ("four", 2, 4))
    engine = PlacementEngine(cmap)
    decisions = engine.place_batch([on_hub(1, a100) for a100 in (3, 2, 6, 8, 3)])
    assert [d.status for d in decisions] == [DecisionStatus.PLACED] * 5
    eight, four = engine.ledger.snapshot().nodes[cmap.site_index["BB-hub"]]
    assert eight.nodes_by_free == (2,) + (0,) * 8 and four.nodes_by_free == (0, 2, 0, 0, 0)
