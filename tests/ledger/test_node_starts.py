"""When a gang could start on a site's nodes, the takes given back as their holders end, and
around the gangs a plan booked there before it (`ledger.node_starts`)."""

from hypothesis import example, given, settings
from hypothesis import strategies as st

from cnbrain.ledger.node_starts import MAX_BOOKED, SiteNodes, earliest_on_nodes
from cnbrain.ledger.nodes import Gang, NodeConflict, NodeState, NodeTake, Pool, pick_on

A100 = Pool(name="a100", count=4, cpu_m=128_000, mem_mib=1_048_576, model="A100", devices=8)


def _whole(node: int, devices: int) -> NodeTake:
    return NodeTake(pool=0, node=node, devices=devices, shared=-1, milli=0, cpu_m=0, mem_mib=0)


def _gang(nodes: int, devices: int) -> Gang:
    return Gang(nodes=nodes, cpu_m=1000, mem_mib=1024, model="A100", devices=devices)


def test_a_gang_starts_when_enough_of_its_nodes_have_freed() -> None:
    """Five of each node's eight taken, the takes ending at 100, 200, 300 and 400: twelve
    free now, three a node."""
    takes = [(100 * (n + 1), _whole(n, 5)) for n in range(4)]
    assert earliest_on_nodes([A100], takes, _gang(1, 3), now=0) == 0
    assert earliest_on_nodes([A100], takes, _gang(1, 8), now=0) == 100
    assert earliest_on_nodes([A100], takes, _gang(2, 8), now=0) == 200
    assert earliest_on_nodes([A100], takes, _gang(4, 4), now=0) == 400
    assert earliest_on_nodes([A100], takes, _gang(5, 1), now=0) is None  # four nodes only
    # A take whose holder has ended already counts as ending now.
    assert earliest_on_nodes([A100], [(-5, _whole(0, 8))], _gang(4, 8), now=0) == 0


def test_a_fraction_waits_for_a_shared_accelerator_with_room_or_a_whole_one() -> None:
    pool = Pool(name="t4", count=1, cpu_m=64_000, mem_mib=262_144, model="T4", devices=2)
    shared = NodeTake(pool=0, node=0, devices=0, shared=0, milli=700, cpu_m=0, mem_mib=0)
    whole = NodeTake(pool=0, node=0, devices=1, shared=-1, milli=0, cpu_m=0, mem_mib=0)
    takes = [(50, shared), (80, whole)]
    fraction = Gang(nodes=1, cpu_m=1000, mem_mib=1024, model="T4", milli=500)
    assert earliest_on_nodes([pool], takes, fraction, now=0) == 50
    small = Gang(nodes=1, cpu_m=1000, mem_mib=1024, model="T4", milli=300)
    assert earliest_on_nodes([pool], takes, small, now=0) == 0


@settings(max_examples=150, deadline=None)
@given(
    takes=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(1, 8)), max_size=12),
    nodes=st.integers(1, 4),
    devices=st.integers(1, 8),
)
def test_the_start_is_the_first_end_at_which_the_ledgers_choice_holds_the_gang(
    takes: list[tuple[int, int, int]], nodes: int, devices: int
) -> None:
    """Against the nodes rebuilt at every end with only the takes still held."""
    kept: list[tuple[int, NodeTake]] = []
    state = NodeState(A100)
    for end, node, amount in takes:
        take = _whole(node, amount)
        try:
            state.apply(take)
        except NodeConflict:
            continue  # beyond the node: a ledger never holds it
        kept.append((end * 10, take))
    gang = _gang(nodes, devices)

    def fits_at(moment: int) -> bool:
        at = NodeState(A100)
        for end, take in kept:
            if end > moment:
                at.apply(take)
        return pick_on([at], gang) is not None

    found = earliest_on_nodes([A100], kept, gang, now=0)
    moments = sorted({0, *(end for end, _ in kept)})
    expected = next((m for m in moments if fits_at(m)), None)
    assert found == expected


def _each_node_five_of_eight() -> SiteNodes:
    """Five of each node's eight A100 taken, the takes ending at 100, 200, 300 and 400."""
    return SiteNodes([A100], [(100 * (n + 1), _whole(n, 5)) for n in range(4)])


def test_two_gangs_waiting_for_a_node_are_planned_for_two_nodes_as_they_free() -> None:
    nodes = _each_node_five_of_eight()
    first = nodes.free_from(_gang(1, 8), 0, 1000, now=0)
    assert first == 100
    [booked] = nodes.book(_gang(1, 8), 100, 1100, now=0) or []
    assert (booked.node, booked.devices) == (0, 8)
    assert nodes.free_from(_gang(1, 8), 0, 1000, now=0) == 200
    nodes.book(_gang(1, 8), 200, 1200, now=0)
    # The next gangs have the nodes the bookings leave: the third, then the fourth.
    assert nodes.free_from(_gang(1, 8), 0, 10, now=0) == 300
    assert nodes.free_from(_gang(2, 8), 0, 10, now=0) == 400
    assert nodes.free_from(_gang(3, 8), 0, 10, now=0) == 1100


def test_a_gang_fits_before_a_booking_on_its_node_only_when_it_ends_by_then() -> None:
    nodes = SiteNodes([A100], [(100, _whole(0, 5)), (1000, _whole(1, 8)), (1000, _whole(2, 8))])
    nodes.book(_gang(1, 8), 100, 500, now=0)  # node 0, once its take ends
    # Node 3 is whole now; node 0 has three free until the booking, none during it.
    assert nodes.free_from(_gang(2, 3), 0, 100, now=0) == 0
    assert nodes.free_from(_gang(2, 3), 0, 101, now=0) == 500
    assert nodes.free_from(_gang(1, 8), 0, 5000, now=0) == 0  # node 3


def test_a_gang_booked_to_start_now_holds_its_nodes_from_now() -> None:
    nodes = _each_node_five_of_eight()
    [booked] = nodes.book(_gang(1, 3), 0, 50, now=0) or []
    assert (booked.node, booked.devices) == (0, 3)
    assert nodes.free_from(_gang(4, 3), 0, 10, now=0) == 50
    assert nodes.free_from(_gang(5, 1), 0, 10, now=0) is None  # four nodes only


def test_a_site_books_its_first_gangs_to_start_later_and_plans_the_others_around_them() -> None:
    nodes = SiteNodes([A100], [])
    for i in range(MAX_BOOKED):
        assert nodes.book(_gang(1, 1), 100 + i, 200, now=0) is not None
    assert nodes.book(_gang(1, 1), 150, 200, now=0) is None  # not booked
    assert nodes.free_from(_gang(4, 8), 0, 150, now=0) == 200  # around the eight booked
    assert nodes.book(_gang(4, 2), 0, 10, now=0) is not None  # from now: held as a take
    assert nodes.free_from(_gang(4, 7), 0, 5, now=0) == 10


@settings(max_examples=100, deadline=None)
@example(takes=[(0, 0, 1)] * 3, gangs=[(4, 6, 1, 0)])  # takes that ended by now
@given(
    takes=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(1, 8)), max_size=8),
    gangs=st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 8), st.integers(1, 50), st.integers(0, 40)),
        min_size=1,
        max_size=8,
    ),
)
def test_gangs_booked_where_the_nodes_hold_them_never_overfill_a_node(
    takes: list[tuple[int, int, int]], gangs: list[tuple[int, int, int, int]]
) -> None:
    """Each gang (nodes, devices, duration, earliest start) is booked at its `free_from`:
    at every moment, no node holds more than its eight A100 of the takes still held and the
    bookings under way."""
    kept: list[tuple[int, NodeTake]] = []
    state = NodeState(A100)
    for end, node, amount in takes:
        try:
            state.apply(_whole(node, amount))
        except NodeConflict:
            continue
        kept.append((end * 10, _whole(node, amount)))
    nodes = SiteNodes([A100], kept)
    held: list[tuple[int, int, NodeTake]] = [(0, end, take) for end, take in kept]
    for count, devices, duration, after in gangs:
        gang = _gang(count, devices)
        start = nodes.free_from(gang, after, duration, now=0)
        assert start is not None and start >= after
        booked = nodes.book(gang, start, start + duration, now=0)
        assert booked is not None and len(booked) == count
        held += [(start, start + duration, take) for take in booked]
    for moment in sorted({begin for begin, _, _ in held} | {end for _, end, _ in held}):
        used = [0] * A100.count
        for begin, end, take in held:
            if begin <= moment < end:
                used[take.node] += take.devices
        assert max(used) <= A100.devices, (moment, used)


T4 = Pool(name="t4", count=3, cpu_m=16_000, mem_mib=65_536, model="T4", devices=4)


@settings(max_examples=100, deadline=None)
@example(gangs=[(1, 0, 500, 1, 1, 1), (1, 0, 700, 1, 1, 1)])  # two shares of one window
@example(
    gangs=[(1, 0, 500, 2, 0, 1), (1, 0, 700, 1, 0, 1), (1, 3, 0, 1, 1, 1), (1, 0, 250, 2, 0, 1)]
)
@given(
    gangs=st.lists(
        st.tuples(
            st.integers(1, 3),
            st.integers(0, 4),
            st.sampled_from([0, 250, 500, 700]),
            st.integers(1, 50),
            st.integers(0, 40),
            st.integers(1, 8),
        ),
        min_size=1,
        max_size=14,
    )
)
def test_whole_and_shared_accelerators_booked_never_overfill_a_node(
    gangs: list[tuple[int, int, int, int, int, int]],
) -> None:
    """Gangs of whole T4 (nodes, devices) or shares of one (milli), with their cores,
    duration and earliest start, each booked at its `free_from`: at every moment, the takes
    under way fit the nodes, accelerator by accelerator (`NodeState.apply` refuses any
    overfill)."""
    nodes = SiteNodes([T4], [])
    held: list[tuple[int, int, NodeTake]] = []
    for count, devices, milli, duration, after, cores in gangs:
        if milli:
            gang = Gang(nodes=1, cpu_m=cores * 1000, mem_mib=1024, model="T4", milli=milli)
        elif devices:
            gang = Gang(nodes=count, cpu_m=cores * 1000, mem_mib=1024, model="T4", devices=devices)
        else:
            continue
        start = nodes.free_from(gang, after, duration, now=0)
        assert start is not None and start >= after
        booked = nodes.book(gang, start, start + duration, now=0)
        if booked is None:
            assert start > 0  # a gang to start later, beyond the site's MAX_BOOKED
            continue
        held += [(start, start + duration, take) for take in booked]
    for moment in sorted({begin for begin, _, _ in held} | {end for _, end, _ in held}):
        state = NodeState(T4)
        for begin, end, take in held:
            if begin <= moment < end:
                state.apply(take)
