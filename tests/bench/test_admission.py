"""`cnbrain bench admission` on a small map, and on the built-in one with gangs waiting for
nodes: its figures add up (timings are not checked)."""

import json
import re

import pytest

from cnbrain.bench.admission import CLASSES, bench_admission
from cnbrain.cli.main import main

SMALL_MAP = "synthetic:provinces=3,sites_per_province=5,seed=1"
LONGEST_WAIT_S = max(c.default_max_wait_s for c in CLASSES)


def test_the_figures_add_up_and_repeat() -> None:
    figures = bench_admission(SMALL_MAP, queued=400, running=150, seed=3)
    assert figures.sites == 15 and figures.queued == 400
    assert 0 < figures.running_held <= figures.running_asked == 150
    assert figures.planned_now + figures.planned_later + figures.no_start == 400
    assert sum(figures.no_start_by_cause.values()) == figures.no_start
    # A small map under a full queue: some start now, some wait, some never start in time.
    assert figures.planned_now > 0 and figures.planned_later > 0 and figures.no_start > 0
    assert 0 < figures.mean_delay_s <= figures.max_delay_s <= LONGEST_WAIT_S
    assert 0 < figures.options <= 400 * figures.top_n
    assert figures.cycle_s > 0 and figures.options_s > 0
    again = bench_admission(SMALL_MAP, queued=400, running=150, seed=3)
    measured = {"options_s", "nodes_s", "order_s", "cycle_s", "cycle_cpu_s", "peak_rss_mib"}
    first = {k: v for k, v in figures.as_dict().items() if k not in measured}
    assert first == {k: v for k, v in again.as_dict().items() if k not in measured}


def test_the_command_prints_figures_that_add_up(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "admission", "--map", SMALL_MAP, "--queued", "300", "--running", "100"]
    assert main([*args, "--seed", "4"]) == 0
    printed = capsys.readouterr().out
    assert "admission cycle:" in printed and "for 300 requests" in printed
    assert re.search(r"peak resident memory: [\d,]+ MiB", printed)
    found = re.search(r"planned now ([\d,]+), later ([\d,]+), no start ([\d,]+)", printed)
    assert found is not None
    assert sum(int(n.replace(",", "")) for n in found.groups()) == 300
    assert main([*args, "--seed", "4", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["planned_now"] + figures["planned_later"] + figures["no_start"] == 300
    assert figures["mean_delay_s"] <= figures["max_delay_s"] <= LONGEST_WAIT_S
    assert figures["peak_rss_mib"] > 0
    assert main(["bench", "admission", "--map", SMALL_MAP, "--top-n", "0"]) == 2
    assert "--top-n at least 1" in capsys.readouterr().err


def test_a_queue_that_moves_data_plans_its_flows(capsys: pytest.CaptureFixture[str]) -> None:
    figures = bench_admission(SMALL_MAP, queued=200, running=50, seed=3, flows=0.5)
    assert 50 < figures.moving < 150
    assert figures.planned_now + figures.planned_later + figures.no_start == 200
    # One option per candidate site and rate step for a request with flows.
    plain = bench_admission(SMALL_MAP, queued=200, running=50, seed=3)
    assert plain.moving == 0 and figures.options > plain.options
    args = ["bench", "admission", "--map", SMALL_MAP, "--queued", "100", "--running", "10"]
    assert main([*args, "--flows", "1"]) == 0
    assert "(100 with flows)" in capsys.readouterr().out
    assert main([*args, "--flows", "1.5"]) == 2
    assert "--flows from 0 to 1" in capsys.readouterr().err


def test_gangs_may_wait_for_the_nodes_of_the_sites(capsys: pytest.CaptureFixture[str]) -> None:
    """On the built-in map, whose sites describe their nodes: the same queue planned by the
    sites' totals alone and by their nodes too."""
    totals = bench_admission("china", queued=300, running=300, seed=3)
    nodes = bench_admission("china", queued=300, running=300, seed=3, nodes=True)
    assert (totals.nodes, totals.nodes_s, nodes.nodes) == (False, 0.0, True)
    assert nodes.nodes_s > 0
    assert nodes.planned_now + nodes.planned_later + nodes.no_start == 300
    # The nodes hold less than the totals say: no more starts now, some later.
    assert nodes.planned_now <= totals.planned_now
    assert nodes.mean_delay_s >= totals.mean_delay_s
    args = ["bench", "admission", "--map", "china", "--queued", "50", "--running", "50"]
    assert main([*args, "--nodes"]) == 0
    printed = capsys.readouterr().out
    assert "when the nodes hold the gangs:" in printed
    assert "gangs booked on the sites' nodes" in printed
