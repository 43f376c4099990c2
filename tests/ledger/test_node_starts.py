"""When a gang could start on a site's nodes, the takes given back as their holders end
(`ledger.node_starts`)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from cnbrain.ledger.node_starts import earliest_on_nodes
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
