"""Slurm's node list read into node reports: GPUs by type from every GRES form it prints, and
whether a node takes new jobs; the reports summarised per node pool of the site."""

import pytest

from cnbrain.execution.jobs import NodeReport
from cnbrain.execution.pool_reports import reported_summaries
from cnbrain.execution.slurm_payloads import gpu_counts, nodes_from, shards_in_use, shared_gpus
from cnbrain.ledger.nodes import Pool


def test_gpu_counts_read_every_form_slurm_prints() -> None:
    assert gpu_counts("gpu:fake:4") == {"fake": 4}
    assert gpu_counts("gpu:fake:0(IDX:N/A)") == {"fake": 0}
    assert gpu_counts("gpu:a100:4(S:0-1),gpu:t4:2,mps:100") == {"a100": 4, "t4": 2}
    assert gpu_counts("gpu:2") == {"": 2}
    assert gpu_counts(None) == gpu_counts("") == gpu_counts("gpu:x:many") == {}
    assert gpu_counts("gpu:x:" + "9" * 5000) == {}


def test_gpus_that_shards_use_are_read_from_their_indices() -> None:
    assert shared_gpus("gpu:fake:0(IDX:N/A),shard:fake:1(IDX:0)") == {"fake": 1}
    assert shared_gpus("gpu:a:1(IDX:0),shard:a:30(IDX:0-2),shard:b:5(IDX:3)") == {"a": 2, "b": 1}
    assert shared_gpus("gpu:fake:2(IDX:0-1),shard:fake:0(IDX:N/A)") == {}
    assert shared_gpus("shard:x:1(IDX:0-99999999)") == {"x": 1024}
    assert shared_gpus("shard:x:1(IDX:" + "0-5000," * 100_000 + "7)") == {"x": 1024}
    assert shared_gpus(None) == shared_gpus("shard:x:1(S:0)") == shared_gpus("junk") == {}


def test_a_node_list_keeps_named_nodes_and_what_jobs_hold() -> None:
    body = {
        "nodes": [
            {
                "name": "n1",
                "state": "mixed",
                "cpus": 64,
                "alloc_cpus": 16,
                "real_memory": 512_000,
                "alloc_memory": 64_000,
                "gres": "gpu:a100:8",
                "gres_used": "gpu:a100:3(IDX:0-2),shard:a100:7(IDX:2-3)",
                "state_flags": ["DRAIN", 7, "x" * 65],
            },
            {"state": "idle"},
            "not a node",
        ]
    }
    [node] = nodes_from(body)
    assert (node.name, node.state, node.cpus, node.cpus_allocated) == ("n1", "mixed", 64, 16)
    assert (node.memory_mib, node.memory_allocated_mib) == (512_000, 64_000)
    assert node.gpus == {"a100": 8} and node.gpus_shared == {"a100": 1}
    assert node.free_gpus == {"a100": 4}  # 3 held whole, 1 with shards in use
    assert node.state_flags == ("DRAIN",) and not node.takes_jobs
    [flagged] = nodes_from({"nodes": [{"name": "n2", "state_flags": ["X"] * 1000}]})
    assert flagged.state_flags == ("X",) * 32


@pytest.mark.parametrize(
    ("state", "flags", "takes"),
    [
        ("idle", (), True),
        ("MIXED", (), True),
        ("allocated", ("COMPLETING",), True),
        ("idle", ("DRAIN",), False),
        ("idle", ("maint",), False),
        ("mixed", ("NOT_RESPONDING",), False),
        ("down", (), False),
        ("future", (), False),
        ("unknown", (), False),
    ],
)
def test_a_node_takes_jobs_only_when_up_and_not_drained(
    state: str, flags: tuple[str, ...], takes: bool
) -> None:
    node = NodeReport(
        name="n",
        state=state,
        state_flags=flags,
        cpus=4,
        cpus_allocated=0,
        memory_mib=1,
        memory_allocated_mib=0,
    )
    assert node.takes_jobs is takes


def node(
    name: str,
    *,
    gpus: dict[str, int] | None = None,
    used: dict[str, int] | None = None,
    state: str = "idle",
    flags: tuple[str, ...] = (),
    cpus: int = 64,
    cpus_allocated: int = 0,
) -> NodeReport:
    return NodeReport(
        name=name,
        state=state,
        state_flags=flags,
        cpus=cpus,
        cpus_allocated=cpus_allocated,
        memory_mib=512_000,
        memory_allocated_mib=0,
        gpus=gpus or {},
        gpus_used=used or {},
    )


def test_reported_nodes_are_summarised_per_pool_of_the_site() -> None:
    pools = (
        Pool("gpu", 3, 64_000, 512_000 * 1024, "A100", 8),
        Pool("cpu", 2, 32_000, 256_000 * 1024, None, 0),
    )
    nodes = [
        node("g1", gpus={"a100": 8}, used={"a100": 3}),
        node("g2", gpus={"a100": 8}, flags=("DRAIN",)),
        node("g3", gpus={"a100": 4}),  # not the pool's shape: left out
        node("g4", gpus={"a100": 8}, cpus_allocated=64),  # no CPU left: none free
        node("g5", gpus={"a100": 8}),  # the pool has three nodes: left out
        node("c1", cpus=48, cpus_allocated=20),
    ]
    gpu, cpu = (r.summary for r in reported_summaries(pools, nodes, {"A100": "a100"}))
    assert gpu.nodes_by_free == (2, 0, 0, 0, 0, 1, 0, 0, 0)
    assert cpu.nodes_by_free[28] == 1  # c1: 28 cores free
    assert cpu.nodes_by_free[0] == 1  # the second CPU node is not reported
    assert sum(cpu.nodes_by_free) == 2
    [unseen] = reported_summaries(pools[:1], nodes, {})  # type "A100" unseen
    assert unseen.summary.free_nodes(1) == 0 and not unseen.shards


def running(job_id: int, state: str, nodes: list[str], details: list[str]) -> dict[str, object]:
    return {
        "job_id": job_id,
        "job_state": state,
        "job_resources": {"allocated_nodes": [{"nodename": n} for n in nodes]},
        "gres_detail": details,
    }


def test_the_shards_jobs_hold_are_read_per_gpu_of_each_node() -> None:
    body = {
        "jobs": [
            running(1, "RUNNING", ["n1"], ["shard:25(IDX:0)"]),
            running(2, "RUNNING", ["n1"], ["shard:fake:30(IDX:0)"]),
            running(3, "SUSPENDED", ["n1", "n2"], ["shard:10(IDX:1)", "shard:10(IDX:3)"]),
            running(4, "PENDING", ["n1"], ["shard:50(IDX:2)"]),
            running(5, "COMPLETED", ["n1"], ["shard:50(IDX:2)"]),
            running(6, "RUNNING", ["n2"], ["shard:150(IDX:0-1)"]),  # split unknown
            running(7, "RUNNING", ["n1", "n2"], ["gpu:fake:1(IDX:2)", ""]),
            running(8, "RUNNING", ["n1", "n2"], ["shard:5(IDX:2)"]),  # no entry per node
            running(9, "RUNNING", ["n3"], ["shard:99999999(IDX:0)"]),
            running(11, "RUNNING", ["n3"], ["shard:" + "9" * 5000 + "(IDX:1)"]),
            {"job_id": 10, "job_state": "RUNNING"},
            "not a job",
        ]
    }
    assert shards_in_use(body) == {
        "n1": {0: 55, 1: 10},
        "n2": {3: 10, 0: 150, 1: 150},
        "n3": {0: 10**6, 1: 10**6},
    }
    assert shards_in_use({}) == shards_in_use({"jobs": "x"}) == {}


def test_a_pool_of_a_site_with_shards_reports_its_shared_gpus() -> None:
    pool = Pool("gpu", 3, 64_000, 512_000 * 1024, "A100", 4)
    sharing = node("g1", gpus={"a100": 4}).model_copy(
        update={"shards_used": {0: 25, 1: 100, 2: 99, 3: 0}}
    )
    drained = node("g2", gpus={"a100": 4}, flags=("DRAIN",)).model_copy(
        update={"shards_used": {0: 50}}
    )
    mixed = node("g3", gpus={"a100": 4, "t4": 1}).model_copy(update={"shards_used": {0: 50}})
    [report] = reported_summaries([pool], [sharing, drained, mixed], {"A100": "a100"}, 100)
    # GPU 0 has 75 of 100 shards free (750 thousandths), GPU 2 one (10); GPU 1 is full. The
    # drained node takes nothing, and the node of two types names no GPU by its shards.
    assert report.shards and report.summary.shared_by_free == ((10, 1), (750, 1))
    [unsharded] = reported_summaries([pool], [sharing], {"A100": "a100"})
    assert not unsharded.shards and unsharded.summary.shared_by_free == ()
