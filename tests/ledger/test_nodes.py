"""Node pools: the compact summary against the node-by-node state it summarises, gangs all or
nothing, fractions packed onto shared accelerators."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cnbrain.domain.accelerators import MILLI
from cnbrain.domain.errors import Invalid
from cnbrain.ledger.nodes import (
    Gang,
    NodeConflict,
    NodeState,
    NodeTake,
    Pool,
    PoolSummary,
    planned_on,
)

BIG = 10**9
"""CPU and memory no gang of these tests runs short of."""


def gpu_pool(count: int = 4, devices: int = 8) -> Pool:
    return Pool("gpu", count, BIG, BIG, "A100", devices)


def whole(nodes: int, devices: int) -> Gang:
    return Gang(nodes=nodes, cpu_m=1000, mem_mib=1024, model="A100", devices=devices)


def fraction(milli: int) -> Gang:
    return Gang(nodes=1, cpu_m=500, mem_mib=512, model="A100", milli=milli)


gangs = st.one_of(
    st.builds(whole, st.integers(1, 5), st.integers(0, 8)),
    st.builds(fraction, st.integers(1, MILLI - 1)),
)


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(1, 6),
    devices=st.integers(1, 8),
    asked=st.lists(gangs, min_size=1, max_size=25),
)
def test_the_summary_fits_and_takes_what_the_nodes_do(
    count: int, devices: int, asked: list[Gang]
) -> None:
    pool = gpu_pool(count, devices)
    state = NodeState(pool)
    summary = state.summary()
    assert summary == PoolSummary.empty(pool)
    held = []
    for gang in asked:
        picked = state.pick(gang, pool_index=0)
        assert summary.fits(gang, pool) == (picked is not None), (gang, summary)
        if picked is None:
            assert state.summary() == summary
            continue
        assert len(picked) == gang.nodes and len({t.node for t in picked}) == gang.nodes
        for take in picked:
            state.apply(take)
        summary = summary.take(gang, pool)
        assert state.summary() == summary
        held.append(picked)
    for picked in reversed(held):
        for take in picked:
            state.apply(take, sign=-1)
    assert state.summary() == PoolSummary.empty(pool)


@settings(max_examples=200, deadline=None)
@given(
    count=st.integers(1, 5),
    asked=st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 32_000), st.integers(1, 64 * 1024)),
        min_size=1,
        max_size=20,
    ),
)
def test_a_gang_that_fits_a_cpu_pools_summary_fits_its_nodes(
    count: int, asked: list[tuple[int, int, int]]
) -> None:
    pool = Pool("cpu", count, 32_000, BIG, None, 0)
    state = NodeState(pool)
    for nodes, cpu_m, mem_mib in asked:
        gang = Gang(nodes=nodes, cpu_m=cpu_m, mem_mib=mem_mib)
        picked = state.pick(gang, pool_index=0)
        if state.summary().fits(gang, pool):
            assert picked is not None
        if picked is not None:
            for take in picked:
                state.apply(take)


def test_a_gang_takes_all_its_nodes_or_none() -> None:
    pool = gpu_pool(count=3, devices=8)
    state = NodeState(pool)
    for take in state.pick(whole(1, 6), pool_index=0) or []:
        state.apply(take)
    before = state.summary()
    assert before.nodes_by_free == (0, 0, 1, 0, 0, 0, 0, 0, 2)
    assert state.pick(whole(3, 4), pool_index=0) is None
    assert not before.fits(whole(3, 4), pool)
    assert state.summary() == before
    picked = state.pick(whole(2, 4), pool_index=0)
    assert picked is not None and sorted(t.node for t in picked) == [1, 2]


def test_a_gang_takes_the_nodes_with_fewest_free_that_hold_it() -> None:
    pool = gpu_pool(count=3, devices=8)
    state = NodeState(pool)
    for gang in (whole(1, 4), whole(1, 6)):
        for take in state.pick(gang, pool_index=0) or []:
            state.apply(take)
    # Node 0 has 4 free, node 1 has 2, node 2 has 8: two nodes of 4 go to 0 and 2.
    picked = state.pick(whole(2, 4), pool_index=0)
    assert picked is not None and [t.node for t in picked] == [0, 2]


def test_fractions_share_an_accelerator_before_opening_another() -> None:
    pool = gpu_pool(count=1, devices=2)
    state = NodeState(pool)
    for milli in (300, 500, 200):
        [take] = state.pick(fraction(milli), pool_index=0) or []
        assert take.shared == 0
        state.apply(take)
    held = ((0, 200, 1), (0, 300, 1), (0, 500, 1))
    assert state.summary() == PoolSummary((0, 1, 0), (), held)  # device 0 full, device 1 whole
    [take] = state.pick(fraction(600), pool_index=0) or []
    assert take.shared == 1
    state.apply(take)
    assert state.summary() == PoolSummary((1, 0, 0), ((400, 1),), (*held, (0, 600, 1)))
    assert state.pick(whole(1, 1), pool_index=0) is None
    assert state.pick(fraction(500), pool_index=0) is None
    assert state.summary().fits(fraction(400), pool)


def test_a_gang_needs_a_pool_of_its_shape() -> None:
    pool = gpu_pool(count=8, devices=8)
    assert not whole(1, 16).suits(pool)  # no node has 16
    assert not whole(9, 8).suits(pool)  # the pool has 8 nodes
    assert not Gang(nodes=1, cpu_m=1000, mem_mib=1, model="H800", devices=1).suits(pool)
    assert not Gang(nodes=1, cpu_m=1000, mem_mib=1).suits(pool)  # CPU work, GPU pool
    assert not PoolSummary.empty(pool).fits(whole(1, 16), pool)


def test_takes_beyond_a_node_are_refused_and_change_nothing() -> None:
    pool = gpu_pool(count=2, devices=2)
    state = NodeState(pool)
    [take] = state.pick(whole(1, 2), pool_index=0) or []
    state.apply(take)
    with pytest.raises(NodeConflict):
        state.apply(take)
    with pytest.raises(NodeConflict):
        state.apply(type(take)(0, 5, 1, -1, 0, 0, 0))
    again = NodeState(pool)
    again.apply(take)
    assert again.summary() == state.summary()


@pytest.mark.parametrize(
    "bad",
    [
        {"nodes": 0, "cpu_m": 1, "mem_mib": 1},
        {"nodes": 2, "cpu_m": 1, "mem_mib": 1, "model": "A100", "milli": 500},
        {"nodes": 1, "cpu_m": 1, "mem_mib": 1, "model": "A100", "milli": MILLI},
        {"nodes": 1, "cpu_m": 1, "mem_mib": 1, "devices": 1},
    ],
)
def test_malformed_gangs_are_invalid(bad: dict[str, object]) -> None:
    with pytest.raises(Invalid):
        Gang(**bad)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    devices=st.integers(1, 8),
    pairs=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), min_size=1, max_size=8),
    asked=gangs,
)
def test_a_summary_within_a_report_shows_no_more_free_than_either(
    devices: int, pairs: list[tuple[int, int]], asked: Gang
) -> None:
    pool = gpu_pool(len(pairs), devices)
    mine = PoolSummary.of_free_units(pool, (a for a, _ in pairs))
    theirs = PoolSummary.of_free_units(pool, (b for _, b in pairs))
    bounded = mine.within(theirs)
    assert sum(bounded.nodes_by_free) == pool.count
    for k in range(devices + 1):
        assert bounded.free_nodes(k) == min(mine.free_nodes(k), theirs.free_nodes(k))
    assert bounded.fits(asked, pool) == (mine.fits(asked, pool) and theirs.fits(asked, pool))


def test_a_summary_of_free_units_counts_every_node_of_the_pool() -> None:
    pool = gpu_pool(count=4, devices=8)
    assert PoolSummary.of_free_units(pool, [8, 3, 3]).nodes_by_free == (1, 0, 0, 2, 0, 0, 0, 0, 1)
    assert PoolSummary.of_free_units(pool, [9, -1, 8, 8, 8]).nodes_by_free == (
        1,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        3,
    )


def test_a_drained_node_in_the_report_is_no_longer_free() -> None:
    pool = gpu_pool(count=2, devices=4)
    state = NodeState(pool)
    state.apply(state.pick(whole(1, 2), pool_index=0)[0])  # type: ignore[index]
    mine = state.summary()
    assert mine.nodes_by_free == (0, 0, 1, 0, 1)
    drained = PoolSummary.of_free_units(pool, [4, 0])
    bounded = mine.within(drained)
    assert bounded.nodes_by_free == (1, 0, 0, 0, 1)
    assert mine.fits(whole(2, 2), pool) and not bounded.fits(whole(2, 2), pool)
    assert bounded.fits(whole(1, 4), pool)
    assert mine.within(PoolSummary.empty(pool)) is mine


def test_summaries_of_two_pools_do_not_bound_each_other() -> None:
    with pytest.raises(Invalid):
        PoolSummary.empty(gpu_pool(2, 4)).within(PoolSummary.empty(gpu_pool(3, 4)))
    with pytest.raises(Invalid):
        PoolSummary.empty(gpu_pool(2, 4)).within(PoolSummary.empty(gpu_pool(2, 8)))


def less_node_by_node(free: list[int], takes: list[int]) -> list[int]:
    """The model of `PoolSummary.less`, node by node: each take, the largest first, from the
    node with the fewest free that holds it, else the node with the most, left with none."""
    nodes = list(free)
    for units in sorted((u for u in takes if u > 0), reverse=True):
        holding = [i for i, f in enumerate(nodes) if f >= units]
        if holding:
            i = min(holding, key=lambda i: nodes[i])
            nodes[i] -= units
        elif any(nodes):
            nodes[max(range(len(nodes)), key=lambda i: nodes[i])] = 0
    return nodes


@settings(max_examples=300, deadline=None)
@given(
    devices=st.integers(1, 8),
    free=st.lists(st.integers(0, 8), min_size=1, max_size=8),
    takes=st.lists(st.integers(0, 9), max_size=10),
)
def test_a_report_less_takes_it_does_not_show_matches_the_nodes_and_shows_no_more(
    devices: int, free: list[int], takes: list[int]
) -> None:
    pool = gpu_pool(len(free), devices)
    free = [min(f, devices) for f in free]
    report = PoolSummary.of_free_units(pool, free)
    less = report.less(takes)
    assert less == PoolSummary.of_free_units(pool, less_node_by_node(free, takes))
    for k in range(devices + 1):
        assert less.free_nodes(k) <= report.free_nodes(k)
    if not any(takes):
        assert less is report


def test_a_take_not_yet_running_and_a_drained_node_do_not_hide_each_other() -> None:
    pool = gpu_pool(count=2, devices=4)
    state = NodeState(pool)
    state.apply(state.pick(whole(1, 2), pool_index=0)[0])  # type: ignore[index]
    mine = state.summary()
    drained = PoolSummary.of_free_units(pool, [4, 0])
    # Bounded by the report alone, the brain's take and the drained node hide each other.
    assert mine.within(drained).fits(whole(1, 4), pool)
    # Less the take it does not show yet, the report leaves one node with 2 free.
    shown = drained.less([2])
    assert shown.nodes_by_free == (1, 0, 1, 0, 0)
    assert mine.within(shown).nodes_by_free == (1, 0, 1, 0, 0)
    assert not mine.within(shown).fits(whole(1, 4), pool)
    # A take larger than any node's free leaves the fullest node with none.
    assert PoolSummary.of_free_units(pool, [3, 1]).less([4]).nodes_by_free == (1, 1, 0, 0, 0)


shared_lists = st.lists(st.integers(1, MILLI - 1), max_size=8)


@settings(max_examples=300, deadline=None)
@given(mine=shared_lists, theirs=shared_lists, opened=shared_lists)
def test_shared_accelerators_within_a_report_of_shards_show_no_more_free_than_either(
    mine: list[int], theirs: list[int], opened: list[int]
) -> None:
    pool = gpu_pool(count=4, devices=8)
    ours = PoolSummary.of_free_units(pool, [8] * 4, mine)
    told = PoolSummary.of_free_units(pool, [8] * 4, theirs).less([1] * len(opened), opened)
    assert sorted(f for f, n in told.shared_by_free for _ in range(n)) == sorted(theirs + opened)

    def at_least(summary: PoolSummary, m: int) -> int:
        return sum(n for free, n in summary.shared_by_free if free >= m)

    bounded = ours.within(told, shared=True)
    assert [f for f, _ in bounded.shared_by_free] == sorted({f for f, _ in bounded.shared_by_free})
    for m in range(1, MILLI):
        assert at_least(bounded, m) == min(at_least(ours, m), at_least(told, m))
    assert ours.within(told).shared_by_free == ours.shared_by_free  # the report tells none


def test_a_plan_names_the_gangs_takes_or_is_not_taken() -> None:
    """Takes a plan names are the gang's when each is its share, on as many distinct nodes
    of one pool that suits it as it has, and the nodes hold them now."""
    state = NodeState(gpu_pool())
    state.apply(NodeTake(0, 1, 8, -1, 0, 1000, 1024))  # node 1 full
    before = state.summary()
    two = [NodeTake(0, n, 3, -1, 0, 1000, 1024) for n in (2, 3)]
    assert planned_on([state], whole(2, 3), two) == two
    assert planned_on([state], whole(2, 3), two[:1]) is None  # one node short
    assert planned_on([state], whole(2, 3), [two[0], two[0]]) is None  # the same node twice
    assert planned_on([state], whole(2, 4), two) is None  # another share
    assert planned_on([state], whole(1, 3), [NodeTake(0, 1, 3, -1, 0, 1000, 1024)]) is None
    assert planned_on([state], whole(1, 3), [NodeTake(1, 2, 3, -1, 0, 1000, 1024)]) is None
    share = [NodeTake(0, 2, 0, 5, 300, 500, 512)]
    assert planned_on([state], fraction(300), share) == share
    assert planned_on([state], fraction(300), [NodeTake(0, 2, 0, -1, 300, 500, 512)]) is None
    assert planned_on([state], fraction(300), [NodeTake(0, 1, 0, 5, 300, 500, 512)]) is None
    assert state.summary() == before  # nothing taken
