"""Priority classes and preemption in the simulator: victims released and requeued, figures
per class, and the `retry` queue unchanged."""

import hashlib
import json
from pathlib import Path

import pytest

from cnbrain.cli.main import main
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.registry import EngineConfig
from cnbrain.simulate.admission import Admission
from cnbrain.simulate.classes import DEFAULT_SHARES, draw_classes, parse_shares
from cnbrain.simulate.metrics import summarise
from cnbrain.simulate.records import JobStatus, SimulationResult
from cnbrain.simulate.report import compare
from cnbrain.simulate.simulation import _Run, simulate
from cnbrain.simulate.trace import TraceJob
from cnbrain.simulate.trace_files import write_trace
from tests.simulate.test_admission import ascend_job
from tests.simulate.test_simulation import by_id, mixed_jobs
from tests.tiny_map import tiny_map_raw


def two_low_and_one_high() -> list[TraceJob]:
    """l1 and l2 (low, 8 Ascend910B each, for 100,000 s) fill CC-hub, the only site with
    that model (16); h (high, 16, for 500 s) arrives at 10 s and could not start within its
    max wait (1 h) without preempting both."""
    return [
        ascend_job("l1", 0, 100_000, 8),
        ascend_job("l2", 1, 100_000, 8),
        ascend_job("h", 10, 500, 16),
    ]


CLASSES = ["low", "low", "high"]


@pytest.mark.parametrize("round_gap_s", [0.0, 1.0])
def test_a_high_job_preempts_the_low_ones_which_are_requeued(
    tiny_map: ComputeNetworkMap, round_gap_s: float
) -> None:
    result = simulate(
        tiny_map,
        two_low_and_one_high(),
        policy="topn-cpsat",
        load=1.0,
        seed=1,
        admission="backfill",
        priority_classes=CLASSES,
        round_gap_s=round_gap_s,
    )
    assert result.finished and result.preemption_modelled
    jobs = by_id(result)
    # h waits for the first round after its arrival (the retry tick at 70 s): it is stuck,
    # the round names l1 and l2, both release, and h starts at the next round: at once, or
    # one round gap later.
    start = 70.0 + round_gap_s
    assert jobs["h"].start_s == start and jobs["h"].preemptions == 0
    for victim, started in (("l1", 0.0), ("l2", 1.0)):
        job = jobs[victim]
        assert job.status is JobStatus.ACCEPTED
        assert job.preemptions == 1
        assert job.preempted_run_s == 70.0 - started
        # Back in the queue at 70 s, placed again when h departs, run in full from there.
        assert job.start_s == start + 500 and job.end_s == start + 500 + 100_000
        assert job.wait_s == start + 500 - started - (70.0 - started)
    summary = summarise(result)
    assert summary.preemptions == 2 and summary.preemption_modelled
    assert summary.accelerator_hours_lost == pytest.approx(8 * (70 + 69) / 3600)
    assert summary.accelerator_hours == pytest.approx((16 * 500 + 2 * 8 * 100_000) / 3600)
    high_wait, low_wait = 60.0 + round_gap_s, 500.0 + round_gap_s
    assert summary.queue_delay_by_class == {
        "high": {
            "jobs": 1.0,
            "accepted": 1.0,
            "accepted_share": 1.0,
            "p50_s": high_wait,
            "p95_s": high_wait,
        },
        "low": {
            "jobs": 2.0,
            "accepted": 2.0,
            "accepted_share": 1.0,
            "p50_s": low_wait,
            "p95_s": low_wait,
        },
    }


def test_the_victims_release_their_reservations_at_once(tiny_map: ComputeNetworkMap) -> None:
    """Stopped just before the round at 70 s, then that round alone: afterwards the ledger
    holds nothing, CC-hub has its 16 Ascend910B free again, and all three jobs wait."""
    run = _Run(
        tiny_map,
        two_low_and_one_high(),
        policy="topn-cpsat",
        load=1.0,
        seed=1,
        queue_limit_s=1800,
        retry_every_s=60,
        round_gap_s=0,
        batch_window_s=0,
        config=EngineConfig(seed=1),
        admission=Admission.BACKFILL,
        priority_classes=CLASSES,
    )
    run.run(horizon_s=69.5, samples=1)
    arrays = run.engine.arrays
    site = tiny_map.site_index["CC-hub"]
    column = arrays.accelerator_column["Ascend910B"]
    assert int(run.engine.ledger.snapshot().free_acc[site, column]) == 0
    assert len(run.engine.ledger.reservations) == 2 and list(run.queue) == [2]
    run.retry_round(70.0)
    assert run.engine.ledger.reservations == {}
    assert int(run.engine.ledger.snapshot().free_acc[site, column]) == 16_000
    assert sorted(run.queue) == [0, 1, 2]
    assert run.queue[0] == "preempted at 70 s for 2"
    assert run.preempted == [1, 1, 0] and run.accepted == 0


def test_a_high_job_stuck_on_a_full_link_preempts_the_low_job_holding_it(
    tiny_map: ComputeNetworkMap,
) -> None:
    """l (low, 100 Gbps) takes the whole access link AA-acc - AA-agg1, the first hop of every
    path from AA within 0.9 ms (to AA-dc and AA-idle). h (high, 10 Gbps, within 0.9 ms) has
    the compute on either site but not the link: the round at 70 s preempts l, on whichever
    site it runs, and h starts then; l is placed again when h departs."""

    def near(job_id: str, arrival_s: float, duration_s: float, gbps: float) -> TraceJob:
        return TraceJob(
            id=job_id,
            arrival_s=arrival_s,
            duration_s=duration_s,
            source_province="AA",
            cpu=1,
            memory_gib=1,
            max_latency_ms=0.9,
            min_bandwidth_gbps=gbps,
        )

    jobs = [near("l", 0, 100_000, 100), near("h", 10, 500, 10)]
    result = simulate(
        tiny_map,
        jobs,
        policy="topn-cpsat",
        load=1.0,
        seed=1,
        admission="backfill",
        priority_classes=["low", "high"],
        round_gap_s=0,
    )
    assert result.finished
    found = by_id(result)
    assert found["h"].status is JobStatus.ACCEPTED
    assert (found["h"].start_s, found["h"].preemptions) == (70.0, 0)
    assert (found["l"].preemptions, found["l"].preempted_run_s) == (1, 70.0)
    assert found["l"].status is JobStatus.ACCEPTED and found["l"].start_s == 570.0
    # Here the two run on different sites: the victim frees the link, not h's site.
    assert {found["h"].site, found["l"].site} == {"AA-dc", "AA-idle"}
    assert summarise(result).preemptions == 1


def test_no_preemption_of_a_class_that_is_not_preemptible(tiny_map: ComputeNetworkMap) -> None:
    """With l1 of class high too, h may preempt neither (l2 alone frees too little): it times
    out at its max wait, 1 h after its arrival."""
    result = simulate(
        tiny_map,
        two_low_and_one_high(),
        policy="topn-cpsat",
        load=1.0,
        seed=1,
        admission="backfill",
        priority_classes=["high", "low", "high"],
    )
    jobs = by_id(result)
    assert jobs["h"].status is JobStatus.REJECTED
    assert jobs["h"].reason is not None and jobs["h"].reason.value == "queue_timeout"
    assert jobs["l2"].preemptions == 0 and summarise(result).preemptions == 0


def test_classes_without_backfill_set_the_queue_limits_only(tiny_map: ComputeNetworkMap) -> None:
    """retry with classes: nothing is preempted; h times out at its class's max wait (1 h
    after its arrival at 10 s), not at the run's queue limit (60 s)."""
    statuses = {}
    for horizon in (3609.0, 3611.0):
        result = simulate(
            tiny_map,
            two_low_and_one_high(),
            policy="topn-cpsat",
            load=1.0,
            seed=1,
            queue_limit_s=60,
            horizon_s=horizon,
            priority_classes=CLASSES,
        )
        assert not result.preemption_modelled
        statuses[horizon] = [j.status for j in result.jobs]
    accepted, waiting = JobStatus.ACCEPTED, JobStatus.WAITING
    assert statuses == {
        3609.0: [accepted, accepted, waiting],
        3611.0: [accepted, accepted, JobStatus.REJECTED],
    }
    summary = summarise(result)
    assert summary.preemptions == 0 and set(summary.queue_delay_by_class) == {"high", "low"}
    assert summary.queue_delay_by_class["high"]["accepted_share"] == 0.0


def _fingerprint(result: SimulationResult) -> str:
    fates = [
        (j.job_id, j.status.value, j.start_s, j.site, j.reason and j.reason.value)
        for j in result.jobs
    ]
    return hashlib.sha256(repr(fates).encode()).hexdigest()[:16]


@pytest.mark.parametrize("policy", ["greedy", "topn-cpsat"])
def test_retry_gives_the_figures_it_gave_before(tiny_map: ComputeNetworkMap, policy: str) -> None:
    """The figures of the FIFO retry queue, recorded before the admission round and classes
    came to the simulator."""
    result = simulate(
        tiny_map, mixed_jobs(120, seed=3), policy=policy, load=1.5, seed=1, queue_limit_s=900
    )
    summary = summarise(result)
    assert summary.accepted == 90
    assert summary.rejected_by_reason == {"never_fits": 0, "queue_timeout": 30}
    assert summary.queue_delay_mean_s == pytest.approx(156.082178)
    assert summary.queue_delay_p95_s == pytest.approx(760.2336)
    assert summary.accelerator_hours == pytest.approx(67.95)
    assert result.engine_calls == 90
    assert _fingerprint(result) == "999aef257cdfc652"
    assert (summary.preemptions, summary.preemption_modelled) == (0, False)
    assert summary.queue_delay_by_class == {} and summary.accelerator_hours_lost == 0.0


def test_class_draws() -> None:
    assert parse_shares("default") == DEFAULT_SHARES
    assert parse_shares("low:1") == {"high": 0.0, "normal": 0.0, "low": 1.0}
    for bad in ("top:1", "high:1,high:2", "high:x", "high:-1", "high:0", "high"):
        with pytest.raises(ValueError, match="--classes"):
            parse_shares(bad)
    drawn = draw_classes(2000, DEFAULT_SHARES, seed=4)
    assert drawn == draw_classes(2000, DEFAULT_SHARES, seed=4)
    assert drawn != draw_classes(2000, DEFAULT_SHARES, seed=5)
    assert abs(drawn.count("high") / 2000 - 0.2) < 0.03
    assert abs(drawn.count("low") / 2000 - 0.3) < 0.03
    assert set(draw_classes(50, {"normal": 1}, seed=0)) == {"normal"}


def test_bad_class_lists_are_refused(tiny_map: ComputeNetworkMap) -> None:
    jobs = two_low_and_one_high()
    with pytest.raises(ValueError, match="2 classes given for 3 jobs"):
        simulate(tiny_map, jobs, policy="greedy", load=1.0, seed=1, priority_classes=["low"] * 2)
    with pytest.raises(ValueError, match="unknown class top"):
        simulate(tiny_map, jobs, policy="greedy", load=1.0, seed=1, priority_classes=["top"] * 3)


def test_compare_and_the_command_report_classes_and_preemptions(
    tiny_map: ComputeNetworkMap, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    summaries = compare(
        tiny_map,
        mixed_jobs(60, seed=2),
        policies=["greedy"],
        loads=[2.0],
        seed=1,
        out_dir=out,
        admissions=["retry", "backfill"],
        class_shares=DEFAULT_SHARES,
    )
    assert [s.preemption_modelled for s in summaries] == [False, True]
    for summary in summaries:
        assert set(summary.queue_delay_by_class) == {"high", "low", "normal"}
        total = sum(c["jobs"] for c in summary.queue_delay_by_class.values())
        assert total == summary.jobs
    report = (out / "report.md").read_text()
    assert "## Queueing delay per priority class" in report
    assert "| greedy | 2 | backfill | high |" in report
    assert "Preemptions (`preempted`)" in report
    data = json.loads((out / "summary.json").read_text())
    assert data["settings"]["class_shares"] == DEFAULT_SHARES

    map_file = tmp_path / "tiny.json"
    map_file.write_text(json.dumps(tiny_map_raw()))
    trace = tmp_path / "trace.jsonl"
    write_trace(two_low_and_one_high(), trace)
    args = ["simulate", "--map", str(map_file), "--trace", str(trace), "--out", str(out)]
    args += ["--policies", "topn-cpsat", "--load", "1", "--admission", "backfill"]
    assert main([*args, "--classes", "low:0.5,high:0.5"]) == 0
    assert "--classes low:0.5,high:0.5" in capsys.readouterr().out + (out / "report.md").read_text()
    runs = json.loads((out / "summary.json").read_text())["runs"]
    assert runs[0]["preemption_modelled"] is True
    assert main([*args, "--classes", "top:1"]) == 2
    assert "--classes 'top:1'" in capsys.readouterr().err
