"""The simulator's admission order (`retry`, `fair`) and the figures of queueing, served
accelerator-hours and fairness between tenants."""

import json
from pathlib import Path
from typing import Any

import pytest

from cnbrain.cli.main import main
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.simulate.metrics import summarise
from cnbrain.simulate.records import JobOutcome, JobStatus, SimulationResult
from cnbrain.simulate.report import compare
from cnbrain.simulate.simulation import simulate
from cnbrain.simulate.trace import TraceJob
from cnbrain.simulate.trace_files import write_trace
from tests.simulate.test_simulation import big_gpu_job, by_id, mixed_jobs
from tests.tiny_map import tiny_map_raw

NO_TIMEOUT = 10**6


def flood_and_one() -> list[TraceJob]:
    """Tenant `flood` sends ten 16-A100 jobs at 0-9 s, tenant `small` one at 20 s; from AA
    only CC-hub (two at a time) and BB-hub (one) take 16 A100, so three run at once."""
    flood = [big_gpu_job(f"f{i}", i, 1000, tenant="flood", accelerator_count=16) for i in range(10)]
    return [*flood, big_gpu_job("s", 20, 1000, tenant="small", accelerator_count=16)]


def test_fair_serves_the_small_tenant_before_the_flood(tiny_map: ComputeNetworkMap) -> None:
    jobs = flood_and_one()
    runs = {
        admission: simulate(
            tiny_map,
            jobs,
            policy="greedy",
            load=1.0,
            seed=1,
            queue_limit_s=NO_TIMEOUT,
            admission=admission,
        )
        for admission in ("retry", "fair")
    }
    retry, fair = by_id(runs["retry"])["s"], by_id(runs["fair"])["s"]
    # retry: s waits behind the seven queued flood jobs: f3-f5 start at 1000-1002, f6-f8 at
    # 2000-2002, f9 at 3000, s at 3001; fair: at the first departure (1000) flood still holds
    # two slots and small none, so s goes first.
    assert retry.start_s == 3001.0
    assert fair.start_s == 1000.0
    summaries = {admission: summarise(run) for admission, run in runs.items()}
    small_retry = summaries["retry"].queue_delay_by_tenant["small"]
    small_fair = summaries["fair"].queue_delay_by_tenant["small"]
    assert small_fair["p50_s"] == 980.0 < small_retry["p50_s"] == 2981.0
    # The same work is served either way, only in another order.
    for summary in summaries.values():
        assert summary.accepted == len(jobs)
        assert summary.accelerator_hours == pytest.approx(11 * 16 * 1000 / 3600)
        assert summary.admission in ("retry", "fair")
        assert (summary.preemptions, summary.preemption_modelled) == (0, False)


def test_fair_with_one_tenant_is_the_retry_queue(tiny_map: ComputeNetworkMap) -> None:
    """With one tenant, fair order is age order: the same run as the FIFO retry queue."""
    jobs = [job.model_copy(update={"tenant": "only"}) for job in mixed_jobs(120, seed=3)]

    def fates(result: SimulationResult) -> list[tuple[Any, ...]]:
        return [(j.job_id, j.status, j.start_s, j.site, j.reason) for j in result.jobs]

    retry = simulate(tiny_map, jobs, policy="topn-cpsat", load=1.5, seed=1, queue_limit_s=900)
    fair = simulate(
        tiny_map, jobs, policy="topn-cpsat", load=1.5, seed=1, queue_limit_s=900, admission="fair"
    )
    assert fates(fair) == fates(retry)
    assert any(j.wait_s for j in retry.jobs if j.status is JobStatus.ACCEPTED)


def test_the_default_admission_is_retry(tiny_map: ComputeNetworkMap) -> None:
    jobs = mixed_jobs(80, seed=5)
    default = simulate(tiny_map, jobs, policy="greedy", load=2.0, seed=7)
    retry = simulate(tiny_map, jobs, policy="greedy", load=2.0, seed=7, admission="retry")
    assert default.jobs == retry.jobs and default.admission == "retry"
    with pytest.raises(ValueError, match="unknown admission"):
        simulate(tiny_map, jobs, policy="greedy", load=2.0, seed=7, admission="nope")


def _outcome(job_id: str, tenant: str, **fields: Any) -> JobOutcome:
    return JobOutcome(job_id=job_id, tenant=tenant, **fields)


def test_new_figures_on_a_hand_made_result() -> None:
    accepted = JobStatus.ACCEPTED
    jobs = (
        # a: waits 0, 10, 20, 30 s; 2 accelerators for 1800 s each = 4 accelerator-hours.
        *(
            _outcome(
                f"a{k}",
                "a",
                status=accepted,
                arrival_s=0.0,
                start_s=10.0 * k,
                end_s=10.0 * k + 1800,
                accelerators=2,
            )
            for k in range(4)
        ),
        # b: one job that waited 100 s, 4 accelerators, cut by the end of the run at 3700 s
        # after 3600 s of its 7200: 4 accelerator-hours.
        _outcome(
            "b0", "b", status=accepted, arrival_s=0.0, start_s=100.0, end_s=7300.0, accelerators=4
        ),
        # c: asked for accelerators and was never served; d: CPU only.
        _outcome("c0", "c", status=JobStatus.REJECTED, arrival_s=0.0, accelerators=8),
        _outcome("d0", "d", status=accepted, arrival_s=5.0, start_s=5.0, end_s=50.0),
    )
    result = SimulationResult(
        policy="greedy",
        load=1.0,
        seed=0,
        jobs=jobs,
        samples=(),
        site_ids=(),
        link_ids=(),
        end_s=3700.0,
        finished=False,
        reservations_held_at_end=1,
        engine_calls=0,
        wall_s=0.0,
        admission="fair",
    )
    summary = summarise(result)
    assert summary.admission == "fair"
    # Delays of accepted jobs: 0, 10, 20, 30, 100, 0.
    assert summary.queue_delay_p50_s == 15.0
    assert summary.queue_delay_p95_s == pytest.approx(82.5)
    assert summary.queue_delay_by_tenant == {
        "a": {"p50_s": 15.0, "p95_s": pytest.approx(28.5)},
        "b": {"p50_s": 100.0, "p95_s": 100.0},
        "d": {"p50_s": 0.0, "p95_s": 0.0},
    }
    assert summary.accelerator_hours_by_tenant == {"a": 4.0, "b": 4.0, "c": 0.0}
    assert summary.accelerator_hours == 8.0
    # Jain over a, b, c of (4, 4, 0): 64 / (3 * 32) = 2/3.
    assert summary.fairness_accelerator_hours_jain == pytest.approx(2 / 3)
    assert (summary.preemptions, summary.preemption_modelled) == (0, False)


def test_compare_runs_every_admission(tiny_map: ComputeNetworkMap, tmp_path: Path) -> None:
    out = tmp_path / "out"
    summaries = compare(
        tiny_map,
        flood_and_one(),
        policies=["topn-cpsat", "greedy"],
        loads=[1.0],
        seed=1,
        out_dir=out,
        queue_limit_s=NO_TIMEOUT,
        admissions=["retry", "fair"],
    )
    assert [(s.admission, s.policy) for s in summaries] == [
        ("retry", "topn-cpsat"),
        ("retry", "greedy"),
        ("fair", "topn-cpsat"),
        ("fair", "greedy"),
    ]
    data = json.loads((out / "summary.json").read_text())
    assert data["settings"]["admissions"] == ["retry", "fair"]
    assert {(s["admission"], s["baseline"]) for s in data["standings"]} == {
        ("retry", "greedy"),
        ("fair", "greedy"),
    }
    assert data["runs"][0]["queue_delay_by_tenant"]["small"]["p50_s"] == 2981.0
    report = (out / "report.md").read_text()
    assert "| greedy | 1 | fair |" in report
    assert "| greedy | 1 | fair | small | 980 | 980 |" in report
    assert "preemption is not modelled" in report
    with pytest.raises(ValueError, match="unknown admission"):
        compare(
            tiny_map, [], policies=["greedy"], loads=[1.0], seed=1, out_dir=out, admissions=["nope"]
        )


def ascend_job(job_id: str, arrival_s: float, duration_s: float, count: int) -> TraceJob:
    """Ascend910B jobs: only CC-hub has them (16)."""
    return big_gpu_job(
        job_id,
        arrival_s,
        duration_s,
        source_province="CC",
        accelerator_model="Ascend910B",
        accelerator_count=count,
    )


@pytest.mark.parametrize(("round_gap_s", "start"), [(0.0, 100.5), (1.0, 101.0)])
def test_backfill_rounds_are_a_round_gap_apart(
    tiny_map: ComputeNetworkMap, round_gap_s: float, start: float
) -> None:
    """s1 and s2 hold CC-hub's 16 Ascend910B until 100 and 100.5 s; b (16) waits. The round
    of s1's departure runs at 100 s (the last one was the tick at 70 s); the one of s2's
    departure runs at 100.5 s without a gap, and with a gap of 1 s at 101 s, where b starts."""
    jobs = [ascend_job("s1", 0, 100, 8), ascend_job("s2", 0.5, 100, 8), ascend_job("b", 10, 50, 16)]
    result = simulate(
        tiny_map,
        jobs,
        policy="greedy",
        load=1.0,
        seed=1,
        admission="backfill",
        round_gap_s=round_gap_s,
    )
    assert by_id(result)["b"].start_s == start


def test_backfill_keeps_a_big_job_from_being_starved(tiny_map: ComputeNetworkMap) -> None:
    """s1 and s2 hold CC-hub's 16 Ascend910B; the big job b (16) waits, then s3 and s4 (8).
    retry: s3 takes s1's half at 1000 and s4 s3's at 2000, so b waits until 3000. backfill:
    b is planned at 2001 (when s2 departs); s3 fits before that and is backfilled at 1000,
    s4 would delay b and is planned after it, at 2501."""
    jobs = [
        ascend_job("s1", 0, 1000, 8),
        ascend_job("s2", 1, 2000, 8),
        ascend_job("b", 10, 500, 16),
        ascend_job("s3", 20, 1000, 8),
        ascend_job("s4", 21, 1000, 8),
    ]
    starts = {}
    for admission in ("retry", "fair", "backfill"):
        result = simulate(
            tiny_map,
            jobs,
            policy="topn-cpsat",
            load=1.0,
            seed=1,
            queue_limit_s=NO_TIMEOUT,
            admission=admission,
        )
        assert result.finished and result.count(JobStatus.ACCEPTED) == len(jobs)
        starts[admission] = {j.job_id: j.start_s for j in result.jobs}
    assert starts["retry"] == {"s1": 0.0, "s2": 1.0, "b": 3000.0, "s3": 1000.0, "s4": 2000.0}
    assert starts["fair"] == starts["retry"]
    assert starts["backfill"] == {"s1": 0.0, "s2": 1.0, "b": 2001.0, "s3": 1000.0, "s4": 2501.0}


def test_simulate_command_takes_admissions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    map_file = tmp_path / "tiny.json"
    map_file.write_text(json.dumps(tiny_map_raw()))
    trace = tmp_path / "trace.jsonl"
    write_trace(flood_and_one(), trace)
    out = tmp_path / "report"
    args = ["simulate", "--map", str(map_file), "--trace", str(trace), "--out", str(out)]
    code = main([*args, "--policies", "greedy", "--load", "1", "--admission", "retry,fair"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "1 policies x 1 loads x 2 admissions" in printed
    assert printed.count(" s  (total ") == 2
    runs = json.loads((out / "summary.json").read_text())["runs"]
    assert [r["admission"] for r in runs] == ["retry", "fair"]
    assert main([*args, "--admission", "fifo"]) == 2
    assert "unknown admission fifo" in capsys.readouterr().err
