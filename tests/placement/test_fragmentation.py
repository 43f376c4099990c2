"""Packing tasks onto nodes device by device: what fits where, fragmentation as the FGD paper
defines it (the array form equal to the plain one), placements that never oversubscribe a
node and refuse only what no node fits, FGD choosing differently from best fit, and what our
FGD adds to the paper's: shapes weighted by scarcity, and devices their node cannot feed."""

from hypothesis import given, settings
from hypothesis import strategies as st

from cnbrain.placement.fragmentation import (
    MILLI,
    POLICIES,
    Cluster,
    Feed,
    NodeState,
    Packer,
    Shapes,
    Task,
    choices,
    fits,
    fragmentation,
    scarcity_weighted,
    workload_of,
)

HALF = Task(cpu_milli=1000, mem_mib=1024, gpus=1, gpu_milli=500)
WHOLE = Task(cpu_milli=1000, mem_mib=1024, gpus=1, gpu_milli=MILLI)
TWO = Task(cpu_milli=1000, mem_mib=1024, gpus=2, gpu_milli=MILLI)
CPU_ONLY = Task(cpu_milli=4000, mem_mib=4096)


def _node(*devices: int, cpu: int = 64_000, mem: int = 262_144, model: str = "T4") -> NodeState:
    return (cpu, mem, model, tuple(sorted(devices)))


def test_a_share_fits_on_a_partly_used_device_and_whole_devices_must_be_free() -> None:
    node = _node(300, 600, MILLI)
    assert fits(node, HALF) and fits(node, WHOLE) and not fits(node, TWO)
    # One choice per distinct device with room: the 600 and the whole one.
    assert sorted(after[3] for after in choices(node, HALF)) == [(100, 300, MILLI), (300, 500, 600)]
    assert choices(node, WHOLE) == [(63_000, 261_120, "T4", (0, 300, 600))]
    assert not fits(_node(MILLI, MILLI, cpu=500), WHOLE)  # too little CPU
    only_v100 = Task(cpu_milli=1, mem_mib=1, gpus=1, gpu_milli=MILLI, models=frozenset({"V100"}))
    assert not fits(_node(MILLI), only_v100) and fits(_node(MILLI, model="V100"), only_v100)
    assert fits(_node(), CPU_ONLY) and not fits(_node(), WHOLE)


def test_fragmentation_counts_what_each_shape_cannot_use() -> None:
    node = _node(300, 600, MILLI)
    # Whole devices: the two partly used ones; halves: the 300; none: all of it.
    assert fragmentation(node, {WHOLE: 1.0}) == 900
    assert fragmentation(node, {HALF: 1.0}) == 300
    assert fragmentation(node, {CPU_ONLY: 1.0}) == 1900
    assert fragmentation(node, {TWO: 1.0}) == 1900  # cannot run here at all
    assert fragmentation(node, {WHOLE: 0.5, HALF: 0.5}) == 600
    assert fragmentation(_node(0, 0), {WHOLE: 1.0}) == 0


def test_the_papers_fgd_keeps_a_device_whole_for_shapes_to_come_where_best_fit_fills_a_gap() -> (
    None
):
    nodes = [_node(MILLI), _node(700)]
    workload = {HALF: 1.0}
    fgd = Packer(Cluster(nodes), "fgd-paper", workload)
    best = Packer(Cluster(nodes), "best-fit", workload)
    # Best fit leaves 200 on the second node, which no half can use; FGD halves the first.
    assert best.place(HALF) == 1 and fgd.place(HALF) == 0
    assert best.fragmented() == 0.2 and fgd.fragmented() == 0.0
    # Counting copies, the 700 holds one half and 200 more either way: a tie that best fit
    # breaks, and the whole device stays whole.
    assert Packer(Cluster(nodes), "fgd", workload).place(HALF) == 1


def _fresh(cpu_cores: int, devices: int) -> NodeState:
    return (cpu_cores * 1000, 524_288, "G2", (MILLI,) * devices)


RARE = Task(cpu_milli=120_000, mem_mib=1024, gpus=8, gpu_milli=MILLI)
"""A shape only a node with more than 96 cores can run."""


def test_a_shape_weighs_its_popularity_over_the_square_of_its_reach() -> None:
    nodes = [_fresh(96, 8)] * 3 + [_fresh(128, 8), _fresh(64, 0)]
    weights = scarcity_weighted({RARE: 0.2, WHOLE: 0.6, CPU_ONLY: 0.2}, nodes)
    # RARE reaches 8 of 32 devices: 0.2 / 0.25**2 = 3.2; WHOLE all of them; CPU_ONLY as it was.
    assert weights[RARE] == 3.2 / 4.0 and weights[WHOLE] == 0.6 / 4.0
    assert weights[CPU_ONLY] == 0.2 / 4.0
    nowhere = Task(cpu_milli=500_000, mem_mib=1, gpus=1, gpu_milli=MILLI)
    assert scarcity_weighted({nowhere: 0.5, WHOLE: 0.5}, nodes) == {nowhere: 0.0, WHOLE: 1.0}


def test_fgd_keeps_whole_the_only_node_a_rare_shape_can_run_where_the_paper_does_not() -> None:
    nodes = [_fresh(96, 8), _fresh(128, 8)]
    wide = Task(cpu_milli=24_000, mem_mib=1024, gpus=1, gpu_milli=MILLI)
    share = Task(cpu_milli=16_000, mem_mib=1024, gpus=1, gpu_milli=300)
    workload = {RARE: 0.1, wide: 0.45, share: 0.45}
    ours, paper = Cluster(nodes), Cluster(nodes)
    fgd, fgd_paper = Packer(ours, "fgd", workload), Packer(paper, "fgd-paper", workload)
    tasks = (share, wide, share, wide)
    assert [fgd.place(t) for t in tasks] == [0, 0, 0, 0]
    assert [fgd_paper.place(t) for t in tasks] == [0, 0, 0, 1]
    assert fits(ours.states[1], RARE) and not any(fits(s, RARE) for s in paper.states)


def test_fgd_leaves_no_device_its_node_cannot_feed_where_the_paper_sees_a_tie() -> None:
    small = Task(cpu_milli=4000, mem_mib=1024, gpus=1, gpu_milli=MILLI)
    hungry = Task(cpu_milli=6000, mem_mib=1024, gpus=1, gpu_milli=MILLI)
    nodes = [_fresh(12, 3), _fresh(64, 3)]
    feed = Feed.of({small: 1.0})
    assert (feed.cpu, feed.mem) == (4.0, 1.024)
    # On the first node, 6 cores are left for 2 devices: enough for one and a half.
    assert feed.unfed((6000, 524_288, "G2", (0, MILLI, MILLI))) == 500
    assert feed.unfed(_fresh(12, 3)) == 0
    # The paper's measure sees no fragment on either (`small` still fits): best fit decides.
    assert Packer(Cluster(nodes), "fgd-paper", {small: 1.0}).place(hungry) == 0
    assert Packer(Cluster(nodes), "fgd", {small: 1.0}).place(hungry) == 1


def test_fgd_fills_a_partly_used_device_where_the_paper_breaks_a_whole_one() -> None:
    share = Task(cpu_milli=1000, mem_mib=1024, gpus=1, gpu_milli=470)
    node: NodeState = (64_000, 524_288, "T4", (530, MILLI))
    assert fragmentation(node, {share: 1.0}) == 0
    assert fragmentation(node, {share: 1.0}, copies=True) == 60 + 60
    # The paper sees no fragment on the node now, and 60 if the share fills the device with
    # 530 free: it takes the whole device. Counting copies, both leave 60 per device.
    placed = {}
    for policy in ("fgd-paper", "fgd"):
        cluster = Cluster([node])
        Packer(cluster, policy, {share: 1.0}).place(share)
        placed[policy] = cluster.states[0][3]
    assert placed == {"fgd-paper": (530, 530), "fgd": (60, MILLI)}
    assert fits((64_000, 524_288, "T4", placed["fgd"]), WHOLE)
    assert not fits((64_000, 524_288, "T4", placed["fgd-paper"]), WHOLE)


_devices = st.lists(st.integers(0, MILLI), min_size=0, max_size=8)
_tasks = st.builds(
    Task,
    cpu_milli=st.integers(0, 16_000),
    mem_mib=st.integers(0, 65_536),
    gpus=st.integers(0, 4),
    gpu_milli=st.integers(1, MILLI),
    models=st.sampled_from([None, frozenset({"T4"}), frozenset({"V100", "A10"})]),
).filter(lambda t: t.gpus == 1 or t.gpu_milli == MILLI or t.gpus == 0)
_states = st.builds(
    lambda cpu, mem, model, devices: (cpu, mem, model, tuple(sorted(devices))),
    st.integers(0, 64_000),
    st.integers(0, 262_144),
    st.sampled_from(["T4", "V100", "A10"]),
    _devices,
)


@settings(max_examples=300, deadline=None)
@given(_states, st.lists(_tasks, min_size=1, max_size=12), st.booleans())
def test_the_array_form_of_fragmentation_equals_the_plain_one(
    state: NodeState, tasks: list[Task], copies: bool
) -> None:
    workload = workload_of(tasks)
    array = Shapes(workload, copies=copies).fragmentation(state)
    assert abs(array - fragmentation(state, workload, copies=copies)) < 1e-6


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_states, min_size=1, max_size=6),
    st.lists(_tasks, min_size=1, max_size=40),
    st.sampled_from(POLICIES),
)
def test_packing_never_oversubscribes_a_node_and_refuses_only_what_no_node_fits(
    nodes: list[NodeState], tasks: list[Task], policy: str
) -> None:
    cluster = Cluster(nodes)
    packer = Packer(cluster, policy, workload_of(tasks), seed=1)  # type: ignore[arg-type]
    cpu = [state[0] for state in cluster.states]
    mem = [state[1] for state in cluster.states]
    for task in tasks:
        before = list(cluster.states)
        node = packer.place(task)
        if node is None:
            assert not any(fits(state, task) for state in before)
            assert cluster.states == before
            continue
        assert fits(before[node], task)
        cpu[node] -= task.cpu_milli
        mem[node] -= task.mem_mib
        assert cpu[node] == cluster.states[node][0] >= 0
        assert mem[node] == cluster.states[node][1] >= 0
        assert all(0 <= free <= MILLI for free in cluster.states[node][3])
        assert sum(before[node][3]) - sum(cluster.states[node][3]) == task.demand
        assert all(cluster.states[i] == before[i] for i in range(len(nodes)) if i != node)
    assert cluster.capacity - cluster.allocated == sum(sum(s[3]) for s in cluster.states)
    assert {i for b in cluster.buckets.values() for i in b} == set(range(len(nodes)))
