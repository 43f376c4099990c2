"""The fragmentation experiment: the Alibaba node and task lists read with every bad field
named, the same draws for every policy, stranded devices as the refused demand below load 1
and every idle device above it, and `cnbrain fragmentation` on the real node list."""

from pathlib import Path

import pytest

from cnbrain.cli.main import main
from cnbrain.placement.fragmentation import MILLI, Task
from cnbrain.simulate.packing import PackingInputError, read_nodes, read_tasks, run

DATA = Path(__file__).parents[1] / "data"
NODES = DATA / "openb_node_list_all_node.csv"
PODS = DATA / "openb_pod_list_default_head400.csv"


def test_the_real_lists_read_as_nodes_and_tasks() -> None:
    nodes = read_nodes(NODES)
    assert len(nodes) == 1523
    assert sum(len(devices) for _, _, _, devices in nodes) == 6212
    assert nodes[0] == (32_000, 262_144, "", ())  # a CPU node
    tasks = read_tasks(PODS)
    assert len(tasks) == 400
    assert sum(1 for t in tasks if t.gpus == 0) == 24
    assert sum(1 for t in tasks if t.gpus == 8) == 4
    assert all(t.gpu_milli == MILLI for t in tasks if t.gpus > 1)
    assert any(t.fractional for t in tasks)


def test_a_list_without_times_or_models_reads_too(tmp_path: Path) -> None:
    five = tmp_path / "multigpu.csv"
    five.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,12000,16384,1,1000\np1,6000,12288,1,460\n"
        "p2,8000,32768,4,1000\n"
    )
    assert read_tasks(five) == [
        Task(12_000, 16_384, 1, MILLI),
        Task(6_000, 12_288, 1, 460),
        Task(8_000, 32_768, 4, MILLI),
    ]


@pytest.mark.parametrize(
    ("row", "named"),
    [
        ("p,x,1,1,1000", ":2: cpu_milli: not an integer"),
        ("p,1,1,65,1000", ":2: num_gpu: must be within 0..64"),
        ("p,1,1,1,1001", ":2: gpu_milli: must be within 0..1000"),
        ("p,1,1,1,0", ":2: gpu_milli: a one-device task asks 1..1000"),
        ("p,-1,1,0,0", ":2: cpu_milli: must be within"),
    ],
)
def test_a_bad_task_field_is_named_with_its_line(tmp_path: Path, row: str, named: str) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(f"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n{row}\n")
    with pytest.raises(PackingInputError, match=named):
        read_tasks(bad)


def test_a_bad_node_list_is_refused_naming_what(tmp_path: Path) -> None:
    bad = tmp_path / "nodes.csv"
    bad.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,\n")
    with pytest.raises(PackingInputError, match=":2: model: a node with devices names its"):
        read_nodes(bad)
    bad.write_text("sn,cpu_milli,memory_mib\nn0,1000,1024\n")
    with pytest.raises(PackingInputError, match="no column gpu, model"):
        read_nodes(bad)


def test_stranded_devices_are_the_refused_demand_below_load_one_and_idle_ones_above() -> None:
    nodes = [(64_000, 262_144, "T4", (MILLI,) * 2), (64_000, 262_144, "T4", (MILLI,) * 2)]
    tasks = [Task(1000, 1024, 1, 700), Task(1000, 1024, 2, MILLI)]
    runs = {
        (load, policy): run(nodes, tasks, trace="t", load=load, policy=policy, seed=3)
        for load in (0.9, 1.2)
        for policy in ("fgd", "worst-fit")
    }
    for load in (0.9, 1.2):
        ours, spread = runs[(load, "fgd")], runs[(load, "worst-fit")]
        assert ours.arrived == spread.arrived and ours.asked_devices == spread.asked_devices
    for r in runs.values():
        refused = r.asked_devices - r.placed_devices
        idle = r.unallocated_devices
        assert r.capacity_devices == 4
        # A device partly used holds one 0.7 share (two never fit): 0.3 of it is free.
        slivers = r.partly_used_devices / 0.3
        assert slivers == pytest.approx(round(slivers))
        assert r.partly_used_devices <= r.unallocated_devices
        if r.asked_devices <= r.capacity_devices:
            assert r.stranded_devices == pytest.approx(refused)
        else:
            assert r.stranded_devices == pytest.approx(idle)
    # Spreading the 0.7 shares over both nodes strands the pairs of whole devices.
    assert runs[(1.2, "worst-fit")].stranded_devices > runs[(1.2, "fgd")].stranded_devices


def _command(out: Path, *extra: str) -> int:
    """`cnbrain fragmentation` of the head of the default list on the real nodes."""
    base = ["fragmentation", "--nodes", str(NODES), "--tasks", str(PODS), "--out", str(out)]
    return main([*base, *extra])


def test_the_command_reports_every_policy_and_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "frag"
    policies = ("--policies", "fgd,fgd-paper,best-fit", "--workers", "1")
    assert _command(out, "--load", "0.2", *policies) == 0
    report = (out / "report.md").read_text()
    assert "## openb_pod_list_default_head400" in report
    assert "| fgd | 0.2 |" in report and "| fgd-paper | 0.2 |" in report
    assert "| best-fit | 0.2 |" in report
    assert "- load 0.2: fgd " in report and "best baseline best-fit" in report
    assert (out / "runs.json").exists()
    # The paper's measure alone is ours without what we add, not a baseline: no verdict.
    assert _command(out, "--load", "0.2", "--policies", "fgd,fgd-paper", "--workers", "1") == 0
    assert "- load 0.2" not in (out / "report.md").read_text()
    capsys.readouterr()
    assert _command(out, "--load", "5") == 2
    assert "every load must be at most 4" in capsys.readouterr().out
    assert _command(out, "--policies", "tetris") == 2
    assert "unknown policy tetris" in capsys.readouterr().out
