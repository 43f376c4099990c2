"""The what-if simulation on the tiny map: hand-checked scenarios, conservation, determinism,
load scaling, metrics, the report and the `cnbrain simulate` command."""

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from cnbrain.cli.main import main
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.simulate.eligibility import Eligibility
from cnbrain.simulate.metrics import jain_index, summarise
from cnbrain.simulate.no_path import NoPathMemo
from cnbrain.simulate.offered import capacity_factor, offered_load, scaled
from cnbrain.simulate.records import JobStatus, RejectReason, SimulationResult
from cnbrain.simulate.report import compare
from cnbrain.simulate.simulation import simulate
from cnbrain.simulate.trace import TraceJob
from cnbrain.simulate.trace_files import write_trace
from tests.tiny_map import tiny_map_raw


def big_gpu_job(job_id: str, arrival_s: float, duration_s: float, **extra: Any) -> TraceJob:
    """32 A100 from AA: only CC-hub has that many (BB-hub has 16; BB-dc is no hub)."""
    fields: dict[str, Any] = {
        "id": job_id,
        "arrival_s": arrival_s,
        "duration_s": duration_s,
        "source_province": "AA",
        "workload_class": "training",
        "cpu": 8,
        "memory_gib": 64,
        "accelerator_model": "A100",
        "accelerator_count": 32,
    }
    return TraceJob.model_validate(fields | extra)


def mixed_jobs(count: int, seed: int) -> list[TraceJob]:
    """A busy mix on the tiny map: CPU jobs and 1-16 A100 jobs from all provinces."""
    rng = random.Random(seed)
    jobs = []
    t = 0.0
    for i in range(count):
        t += rng.expovariate(1 / 30)
        gpus = rng.choice([0, 0, 1, 2, 4, 8, 16])
        jobs.append(
            TraceJob(
                id=f"j{i:03d}",
                arrival_s=round(t, 3),
                duration_s=rng.choice([60, 300, 900, 1800, 3600]),
                source_province=rng.choice(["AA", "BB", "CC"]),
                tenant=f"t{i % 3}",
                cpu=rng.choice([2, 8, 32, 64]),
                memory_gib=rng.choice([8, 64, 256]),
                accelerator_model="A100" if gpus else None,
                accelerator_count=gpus,
                min_bandwidth_gbps=rng.choice([0.0, 0.5, 5.0]),
                max_latency_ms=rng.choice([None, 20.0]),
            )
        )
    return jobs


def by_id(result: SimulationResult) -> dict[str, Any]:
    return {j.job_id: j for j in result.jobs}


def test_second_big_job_waits_for_the_first_to_depart(tiny_map: ComputeNetworkMap) -> None:
    jobs = [big_gpu_job("a", 0, 1000), big_gpu_job("b", 100, 500)]
    result = simulate(tiny_map, jobs, policy="topn-cpsat", load=1.0, seed=1)
    a, b = by_id(result)["a"], by_id(result)["b"]
    assert (a.status, a.site, a.start_s, a.end_s) == (JobStatus.ACCEPTED, "CC-hub", 0.0, 1000.0)
    assert (b.status, b.site, b.start_s, b.end_s) == (JobStatus.ACCEPTED, "CC-hub", 1000.0, 1500.0)
    assert b.wait_s == 900.0
    summary = summarise(result)
    assert summary.accepted_share == 1.0
    assert summary.waited == 1
    assert summary.queue_delay_mean_s == 450.0
    # b was never sent to the engine while CC-hub was full: one call per placement.
    assert result.engine_calls == 2
    assert result.finished and result.reservations_held_at_end == 0
    assert result.end_s == 1500.0


def test_a_job_that_waits_too_long_is_rejected_at_its_limit(tiny_map: ComputeNetworkMap) -> None:
    jobs = [big_gpu_job("a", 0, 1000), big_gpu_job("b", 100, 500)]
    result = simulate(tiny_map, jobs, policy="greedy", load=1.0, seed=1, queue_limit_s=600)
    b = by_id(result)["b"]
    assert (b.status, b.reason) == (JobStatus.REJECTED, RejectReason.QUEUE_TIMEOUT)
    assert b.detail is not None and "free" in b.detail
    summary = summarise(result)
    assert summary.rejected_by_reason == {"never_fits": 0, "queue_timeout": 1}
    assert summary.accepted_share == 0.5


def test_a_job_no_site_can_ever_take_is_rejected_at_arrival(tiny_map: ComputeNetworkMap) -> None:
    jobs = [
        big_gpu_job("too-big", 0, 100, accelerator_count=64),
        big_gpu_job("wrong-model", 5, 100, accelerator_model="H100", accelerator_count=1),
    ]
    result = simulate(tiny_map, jobs, policy="topn-cpsat", load=1.0, seed=1)
    too_big, wrong = by_id(result)["too-big"], by_id(result)["wrong-model"]
    assert (too_big.status, too_big.reason) == (JobStatus.REJECTED, RejectReason.NEVER_FITS)
    assert "total capacity" in (too_big.detail or "")
    assert (wrong.status, wrong.reason) == (JobStatus.REJECTED, RejectReason.NEVER_FITS)
    assert "accelerator_model" in (wrong.detail or "")
    assert result.engine_calls == 0


def test_arrivals_within_the_batch_window_are_placed_together(
    tiny_map: ComputeNetworkMap,
) -> None:
    jobs = [
        big_gpu_job("a", 0, 100, accelerator_count=16),
        big_gpu_job("b", 3, 100, accelerator_count=16),
    ]
    result = simulate(tiny_map, jobs, policy="topn-cpsat", load=1.0, seed=1, batch_window_s=5)
    a, b = by_id(result)["a"], by_id(result)["b"]
    assert (a.start_s, b.start_s) == (5.0, 5.0)
    assert (a.wait_s, b.wait_s) == (5.0, 2.0)
    assert result.engine_calls == 1


@pytest.mark.parametrize("policy", ["topn-cpsat", "first-fit", "random-feasible"])
def test_conservation(tiny_map: ComputeNetworkMap, policy: str) -> None:
    jobs = mixed_jobs(120, seed=3)
    result = simulate(tiny_map, jobs, policy=policy, load=1.5, seed=1, queue_limit_s=900)
    assert [j.job_id for j in result.jobs] == [j.id for j in jobs]
    assert {j.status for j in result.jobs} <= {JobStatus.ACCEPTED, JobStatus.REJECTED}
    assert result.count(JobStatus.REJECTED) > 0 and result.count(JobStatus.ACCEPTED) > 0
    assert result.finished and result.reservations_held_at_end == 0
    duration = {j.id: j.duration_s for j in jobs}
    for outcome in result.jobs:
        if outcome.status is JobStatus.ACCEPTED:
            assert outcome.start_s is not None and outcome.end_s is not None
            assert 0 <= outcome.start_s - outcome.arrival_s <= 900
            assert outcome.end_s - outcome.start_s == pytest.approx(duration[outcome.job_id])
        elif outcome.reason is RejectReason.QUEUE_TIMEOUT:
            assert outcome.detail
    # Every reservation is released when its job ends: at each sample exactly the accepted
    # jobs with start <= t < end hold one.
    for sample in result.samples:
        holding = sum(
            1
            for j in result.jobs
            if j.start_s is not None
            and j.end_s is not None
            and j.start_s <= sample.time_s < j.end_s
        )
        assert sample.running == holding
        assert sample.accepted + sample.rejected + sample.waiting <= len(jobs)


def test_a_horizon_leaves_jobs_waiting_and_running(tiny_map: ComputeNetworkMap) -> None:
    jobs = [*mixed_jobs(60, seed=4), big_gpu_job("a", 0, 5000), big_gpu_job("b", 10, 10)]
    result = simulate(tiny_map, jobs, policy="greedy", load=1.0, seed=1, horizon_s=600)
    statuses = {j.job_id: j.status for j in result.jobs}
    assert statuses["b"] is JobStatus.WAITING
    assert not result.finished
    assert result.end_s == 600
    running = [j for j in result.jobs if j.end_s is not None and j.end_s > 600]
    assert result.reservations_held_at_end == len(running) > 0
    counts = {s: result.count(s) for s in JobStatus}
    assert sum(counts.values()) == len(jobs)


@pytest.mark.parametrize("policy", ["topn-cpsat", "greedy"])
def test_the_shortcuts_change_no_outcome(
    tiny_map: ComputeNetworkMap, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Skipping jobs the engine would reject (reach, no-path memo) gives the same run as
    asking the engine every time, with fewer engine calls."""
    jobs = [
        job.model_copy(update={"min_bandwidth_gbps": bw, "max_latency_ms": bound})
        for job, bw, bound in zip(
            mixed_jobs(90, seed=11),
            [0.0, 20.0, 45.0, 60.0, 5.0] * 18,
            [None, 4.0, None, 12.0, None, None] * 15,
            strict=True,
        )
    ]
    fast = simulate(tiny_map, jobs, policy=policy, load=3.0, seed=1)
    monkeypatch.setattr(Eligibility, "routed", lambda self, snapshot, rows, fit: fit.copy())
    monkeypatch.setattr(NoPathMemo, "rejection", lambda self, version, row, sites: None)
    slow = simulate(tiny_map, jobs, policy=policy, load=3.0, seed=1)

    def fates(result: SimulationResult) -> list[tuple[Any, ...]]:
        return [(j.job_id, j.status, j.start_s, j.site, j.reason) for j in result.jobs]

    assert fates(fast) == fates(slow)
    assert fast.count(JobStatus.REJECTED) > 0
    assert fast.engine_calls < slow.engine_calls


def test_same_seed_same_outcome(tiny_map: ComputeNetworkMap) -> None:
    jobs = mixed_jobs(80, seed=5)
    for policy in ("topn-cpsat", "random-feasible"):
        first = simulate(tiny_map, jobs, policy=policy, load=2.0, seed=7)
        again = simulate(tiny_map, jobs, policy=policy, load=2.0, seed=7)
        assert first.jobs == again.jobs
        one, two = summarise(first).as_dict(), summarise(again).as_dict()
        one.pop("wall_s"), two.pop("wall_s")
        assert one == two


def test_load_divides_arrival_times(tiny_map: ComputeNetworkMap) -> None:
    jobs = [big_gpu_job("a", 0, 1000), big_gpu_job("b", 100, 500)]
    result = simulate(tiny_map, jobs, policy="greedy", load=4.0, seed=1)
    a, b = by_id(result)["a"], by_id(result)["b"]
    assert b.arrival_s == 25.0
    assert (b.start_s, b.end_s) == (1000.0, 1500.0)
    assert a.end_s == 1000.0


def test_bad_options_are_refused(tiny_map: ComputeNetworkMap) -> None:
    jobs = [big_gpu_job("a", 0, 10)]
    with pytest.raises(ValueError, match="unknown policy"):
        simulate(tiny_map, jobs, policy="nope", load=1.0, seed=1)
    with pytest.raises(ValueError, match="load"):
        simulate(tiny_map, jobs, policy="greedy", load=0.0, seed=1)
    for gap in (-1.0, math.nan, math.inf, 3601.0):
        with pytest.raises(ValueError, match="round_gap_s"):
            simulate(tiny_map, jobs, policy="greedy", load=1.0, seed=1, round_gap_s=gap)


def test_metrics_of_a_run(tiny_map: ComputeNetworkMap) -> None:
    jobs = [
        big_gpu_job("a", 0, 1000, tenant="x"),
        big_gpu_job("b", 100, 500, tenant="y"),
        big_gpu_job("c", 100, 500, tenant="y", max_latency_ms=30.0),
    ]
    result = simulate(tiny_map, jobs, policy="greedy", load=1.0, seed=1, samples=11)
    summary = summarise(result)
    assert len(result.samples) == 11
    assert summary.slo_misses == 0
    # a runs 0-1000 on CC-hub, b 1000-1500, c (waiting behind b, within its 1800 s limit)
    # 1500-2000: every tenant gets all its jobs.
    assert summary.accepted == 3
    assert by_id(result)["c"].start_s == 1500.0
    assert summary.fairness_jain == 1.0
    # While b and c wait, a holds CC-hub's 32 A100. Stranded: BB-dc's 8 A100 (no hub: a job
    # from AA may not use it) and CC-hub's 16 Ascend910B (nobody asks for them) = 24. AA-dc's
    # 4 and BB-hub's 16 A100 are sites they may use (just too small), so not stranded.
    assert max(s.stranded_accelerators for s in result.samples) == 24.0
    assert summary.site_utilisation_max == 1.0
    assert summary.cost_cny == pytest.approx(sum(j.cost_cny for j in result.jobs))
    assert len(summary.timeseries["time_s"]) == 11


def test_jain_index() -> None:
    assert jain_index([1.0, 1.0, 1.0]) == 1.0
    assert jain_index([1.0, 0.0]) == 0.5
    assert jain_index([]) == 1.0


def test_capacity_basis_makes_the_offered_load_one(tiny_map: ComputeNetworkMap) -> None:
    jobs = mixed_jobs(50, seed=6)
    factor, at_one = capacity_factor(tiny_map, jobs)
    assert at_one.value == pytest.approx(1.0, rel=1e-6)
    again = offered_load(tiny_map, scaled(jobs, factor))
    assert again.value == pytest.approx(1.0, rel=1e-6)
    assert again.bottleneck == at_one.bottleneck


def test_compare_writes_the_report(tiny_map: ComputeNetworkMap, tmp_path: Path) -> None:
    jobs = mixed_jobs(40, seed=8)
    summaries = compare(
        tiny_map,
        jobs,
        policies=["topn-cpsat", "greedy"],
        loads=[0.5, 2.0],
        seed=1,
        out_dir=tmp_path / "out",
    )
    assert [(s.policy, s.load) for s in summaries] == [
        ("topn-cpsat", 0.5),
        ("topn-cpsat", 2.0),
        ("greedy", 0.5),
        ("greedy", 2.0),
    ]
    out = tmp_path / "out"
    for name in ("acceptance_vs_load.png", "utilisation_over_time.png", "cost_vs_latency.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((out / "summary.json").read_text())
    assert len(data["runs"]) == 4
    assert {s["baseline"] for s in data["standings"]} == {"greedy"}
    report = (out / "report.md").read_text()
    for heading in ("## How it was run", "## Map", "## Trace", "## Results", "## Plots"):
        assert heading in report
    assert "| topn-cpsat | 0.5 |" in report


def test_simulate_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    map_file = tmp_path / "tiny.json"
    map_file.write_text(json.dumps(tiny_map_raw()))
    trace = tmp_path / "trace.jsonl"
    write_trace(mixed_jobs(30, seed=9), trace)
    out = tmp_path / "report"
    code = main(
        [
            "simulate",
            *("--map", str(map_file), "--trace", str(trace)),
            *("--policies", "topn-cpsat,first-fit", "--load", "1,3", "--out", str(out)),
            "--seed",
            "2",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert printed.count(" s  (total ") == 4
    assert (out / "report.md").exists() and (out / "summary.json").exists()
    bad = main(["simulate", "--trace", str(trace), "--policies", "nope", "--out", str(out)])
    assert bad == 2
    assert "unknown policy" in capsys.readouterr().err
