"""Where on a site a gang goes: the pool, nodes and accelerator where fragmentation grows least
against the shapes the site holds, the same on the summaries as node by node; best fit and
the first pool when the site holds nothing."""

from hypothesis import given, settings
from hypothesis import strategies as st

from cnbrain.domain.accelerators import MILLI
from cnbrain.ledger.fragments import MAX_SHAPES, NO_MIX, Mix
from cnbrain.ledger.nodes import (
    Gang,
    NodeState,
    NodeTake,
    Pool,
    PoolSummary,
    fits_on,
    pick_on,
    pool_order,
    take_on,
)

BIG = 10**9


def a100(name: str, count: int, devices: int) -> Pool:
    return Pool(name, count, BIG, BIG, "A100", devices)


def whole(nodes: int, devices: int, model: str = "A100") -> Gang:
    return Gang(nodes=nodes, cpu_m=1000, mem_mib=1024, model=model, devices=devices)


def fraction(milli: int, model: str = "A100") -> Gang:
    return Gang(nodes=1, cpu_m=500, mem_mib=512, model=model, milli=milli)


def place(states: list[NodeState], gang: Gang) -> bool:
    picked = pick_on(states, gang)
    for take in picked or []:
        states[take.pool].apply(take)
    return picked is not None


def best_fit_placed(pools: tuple[Pool, ...], asked: list[Gang]) -> list[bool]:
    """Whether each of `asked` is placed, in turn, on a site of `pools` by best fit alone
    (the choice against an empty mix)."""
    states = [NodeState(pool) for pool in pools]
    placed = []
    for gang in asked:
        summaries = [state.summary() for state in states]
        order = [i for i, _ in pool_order(pools, summaries, gang, NO_MIX)]
        picked = states[order[0]].pick(gang, pool_index=order[0]) if order else None
        for take in picked or []:
            states[take.pool].apply(take)
        placed.append(picked is not None)
    return placed


def test_fragmentation_counts_what_the_held_shapes_cannot_use() -> None:
    mix = Mix.of([((4, 0, 3), (0, 300, 1)), ((4, 0, 1), (2, 0, 2))])
    assert mix == Mix(((0, 300, 1), (2, 0, 2), (4, 0, 4)))
    # 6 whole free: 4 of them for a 4 (2 left, x4), none left for a 2, 100 per device for 300s.
    assert mix.node(6) == 4 * 2000 + 2 * 0 + 1 * 6 * 100
    assert mix.node(1) == 4 * 1000 + 2 * 1000 + 100
    # A shared accelerator with 700 free: all of it for whole ones, 100 for 300s.
    assert mix.shared(700) == 4 * 700 + 2 * 700 + 100
    assert mix.shared(0) == 0
    assert mix.opened_growth(6, 300) == mix.node(5) - mix.node(6) + mix.shared(700)
    assert NO_MIX.node(5) == NO_MIX.shared(300) == 0
    assert list(NO_MIX.levels(2, 8)) == [(k, 0) for k in range(2, 9)]  # best fit
    # Against 4s: 2 of 4 or 5 free breaks a 4, of 2, 3, 6 or 7 does not.
    fours = Mix(((4, 0, 1),))
    levels = list(fours.levels(2, 8))
    assert [k for k, _ in levels] == [2, 3, 6, 7, 4, 5, 8]
    assert all(growth == fours.node(k - 2) - fours.node(k) for k, growth in levels)


def test_a_gang_keeps_the_free_accelerators_the_held_shapes_use() -> None:
    # The site's gangs ask for 4 A100 a node. A 2-node gang of 2 takes one node with 4 free
    # and one with 8, not both 4s as best fit does: two nodes keep 4 free for the next gang.
    pool = a100("a100", 4, 8)
    asked = [whole(1, 4), whole(1, 3), whole(2, 4), whole(2, 2), whole(2, 4)]
    states = [NodeState(pool)]
    assert [place(states, gang) for gang in asked] == [True] * 5
    assert states[0].summary().nodes_by_free == (1, 1, 2, 0, 0, 0, 0, 0, 0)
    assert best_fit_placed((pool,), asked) == [True, True, True, True, False]


def test_a_mix_keeps_the_shapes_held_most() -> None:
    many = tuple((0, milli, 1) for milli in range(1, 200))
    mix = Mix.of([many, ((0, 500, 3), (8, 0, 2))])
    assert len(mix.shapes) == MAX_SHAPES
    assert mix.shapes[-2:] == ((0, 500, 3), (8, 0, 2))  # held most, then the smallest
    assert mix.shapes[:-2] == tuple((0, milli, 1) for milli in range(1, MAX_SHAPES - 1))
    assert Mix.of([many]) == Mix.of([many[:MAX_SHAPES]])


def test_with_nothing_held_a_gang_goes_to_the_pool_it_fits_best() -> None:
    states = [NodeState(a100("eight", 1, 8)), NodeState(a100("two", 4, 2))]
    assert place(states, whole(1, 2))  # on "two", whose node it fills
    assert states[1].summary().nodes_by_free == (1, 0, 3)
    assert place(states, whole(1, 8))


def test_a_gang_goes_to_the_pool_where_it_leaves_what_the_held_shapes_use() -> None:
    # A 3 is held. A 2 on a node of "four" with 4 free would leave 2 there, which no 3 can
    # use; ours puts it on "eight", leaving 6. Then a 6, an 8, and a 3 again all fit, where
    # best fit across the pools leaves no node with 3 free for the last.
    pools = (a100("eight", 2, 8), a100("four", 2, 4))
    asked = [whole(1, 3), whole(1, 2), whole(1, 6), whole(1, 8), whole(1, 3)]
    states = [NodeState(pool) for pool in pools]
    assert [place(states, gang) for gang in asked] == [True] * 5
    assert best_fit_placed(pools, asked) == [True, True, True, True, False]


def test_a_fraction_keeps_the_room_a_held_fraction_uses() -> None:
    # A 400 holds 400 of the first accelerator, a 200 shares it (best fit and ours agree).
    # A second 200 on it would leave 200, which no 400 can use: ours opens the second one
    # instead, so that a 700 and another 400 still fit, where best fit refuses the 400.
    pool = a100("a100", 1, 2)
    asked = [fraction(400), fraction(200), fraction(200), fraction(700), fraction(400)]
    states = [NodeState(pool)]
    assert [place(states, gang) for gang in asked] == [True] * 5
    assert states[0].summary().shared_by_free == ((100, 1),)
    assert best_fit_placed((pool,), asked) == [True, True, True, True, False]


@st.composite
def site_gangs(draw: st.DrawFn) -> Gang:
    model = draw(st.sampled_from(["A100", "T4"]))
    if draw(st.booleans()):
        return fraction(draw(st.integers(1, MILLI - 1)), model)
    return whole(draw(st.integers(1, 3)), draw(st.integers(0, 8)), model)


@settings(max_examples=300, deadline=None)
@given(asked=st.lists(site_gangs(), min_size=1, max_size=30))
def test_the_summaries_take_what_the_nodes_do_on_a_site_of_pools(asked: list[Gang]) -> None:
    pools = (
        a100("eight", 2, 8),
        a100("four", 3, 4),
        Pool("t4", 2, BIG, BIG, "T4", 2),
        a100("two", 2, 2),
    )
    states = [NodeState(pool) for pool in pools]
    summaries = tuple(PoolSummary.empty(pool) for pool in pools)
    held = []
    for gang in asked:
        picked = pick_on(states, gang)
        assert fits_on(pools, summaries, gang) == (picked is not None), gang
        if picked is None:
            continue
        for take in picked:
            states[take.pool].apply(take)
        taken = take_on(pools, summaries, gang)
        assert taken == tuple(state.summary() for state in states), gang
        summaries = taken
        held.append(picked)
    for picked in reversed(held):
        for take in picked:
            states[take.pool].apply(take, sign=-1)
    assert all(state.summary() == PoolSummary.empty(state.pool) for state in states)


def test_takes_summed_per_node_and_shape_count_as_the_takes_they_sum() -> None:
    pool = a100("a100", 2, 8)
    one_by_one, summed = NodeState(pool), NodeState(pool)
    for take in [NodeTake(0, 0, 2, -1, 0, 1000, 10), NodeTake(0, 0, 2, -1, 0, 3000, 30)]:
        one_by_one.apply(take)
    for take in [NodeTake(0, 1, 0, 0, 250, 500, 5), NodeTake(0, 1, 0, 0, 250, 500, 5)]:
        one_by_one.apply(take)
    summed.apply(NodeTake(0, 0, 4, -1, 0, 4000, 40), takes=2)
    summed.apply(NodeTake(0, 1, 0, 0, 500, 1000, 10), takes=2)
    assert summed.summary() == one_by_one.summary()
    assert summed.summary().held == ((0, 250, 2), (2, 0, 2))


def test_a_take_of_nothing_is_held_like_any_other() -> None:
    pool = a100("a100", 1, 8)
    nothing = Gang(nodes=1, cpu_m=0, mem_mib=0, model="A100")
    states = [NodeState(pool)]
    assert place(states, nothing)
    taken = take_on([pool], [PoolSummary.empty(pool)], nothing)
    assert taken == (states[0].summary(),) and taken[0].held == ((0, 0, 1),)
