"""The flow simulation: jobs planned over time with their data flows, the scenario suite and
`cnbrain simulate --scenario`."""

import json
from pathlib import Path

import pytest

from cnbrain.cli.main import main
from cnbrain.domain.enums import WorkloadClass
from cnbrain.domain.flows import Delivery, Endpoint, Flows, Staging
from cnbrain.netmap.china import china_document
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.simulate.flow_simulation import FLOW_POLICIES, simulate_flows
from cnbrain.simulate.scenario_report import RunFigures, RunSpec, run_one, scenario_jobs, verdicts
from cnbrain.simulate.scenarios import SCENARIOS
from cnbrain.simulate.trace import TraceJob
from cnbrain.simulate.trace_files import read_trace

HOUR = 3600.0
EXAMPLE = Path(__file__).resolve().parents[2] / "examples/traces/flows.jsonl"
HUB_DATA = Endpoint(site="CC-hub")


@pytest.fixture(scope="module")
def china() -> ComputeNetworkMap:
    return ComputeNetworkMap.from_document(china_document())


def _training(
    job_id: str, arrival: float, *, volume_gb: float, gpus: int = 4, source: Endpoint = HUB_DATA
) -> TraceJob:
    return TraceJob(
        id=job_id,
        arrival_s=arrival,
        duration_s=HOUR,
        source_province="AA",
        workload_class=WorkloadClass.TRAINING,
        cpu=4.0,
        memory_gib=16.0,
        accelerator_model="A100",
        accelerator_count=gpus,
        flows=Flows(
            staging=(Staging(source=source, volume_gb=volume_gb, max_rate_gbps=10.0),),
            delivery=(Delivery(destination=Endpoint(province="AA"), volume_gb=10.0),),
        ),
    )


def _tiny_jobs() -> list[TraceJob]:
    jobs = [_training(f"t{i}", 60.0 * i, volume_gb=1000.0) for i in range(12)]
    # No site the job may use is in BB: 9 PB from there take longer than its wait everywhere.
    jobs.append(_training("huge", 30.0, volume_gb=9e6, source=Endpoint(province="BB")))
    jobs.append(
        TraceJob(
            id="wide",
            arrival_s=0.0,
            duration_s=HOUR,
            source_province="AA",
            cpu=1.0,
            memory_gib=1.0,
            min_bandwidth_gbps=500.0,
        )
    )
    return jobs


@pytest.mark.parametrize("policy", FLOW_POLICIES)
def test_every_job_is_decided_and_data_arrives_before_the_start(
    tiny_map: ComputeNetworkMap, policy: str
) -> None:
    jobs = _tiny_jobs()
    run = simulate_flows(tiny_map, jobs, policy=policy, max_wait_s=2 * HOUR)
    assert [o.job_id for o in run.outcomes] == [j.id for j in jobs]
    by_id = {o.job_id: o for o in run.outcomes}
    assert not by_id["huge"].accepted and by_id["huge"].blocker == "staging"
    assert not by_id["wide"].accepted and by_id["wide"].blocker == "access link"
    accepted = [o for o in run.outcomes if o.accepted]
    assert len(accepted) >= 6
    for job in jobs:
        outcome = by_id[job.id]
        if not outcome.accepted:
            continue
        assert outcome.start_s is not None and outcome.site is not None
        assert outcome.wait_s <= 2 * HOUR
        if outcome.site != "CC-hub":
            # 1000 GB at 10 Gbps or slower: at least 800 s of staging before the start.
            assert outcome.staging_s >= 800
            assert outcome.start_s - job.arrival_s >= outcome.staging_s
            assert outcome.delivery_s > 0
        else:
            assert outcome.staging_s == 0
        assert outcome.accelerator_hours == pytest.approx(4.0)
        assert outcome.cost_cny > 0 and outcome.energy_kwh > 0
    assert run.accelerator_hours == pytest.approx(4.0 * len(accepted))
    again = simulate_flows(tiny_map, jobs, policy=policy, max_wait_s=2 * HOUR)
    assert again.outcomes == run.outcomes


def test_compute_runs_out_and_the_blocker_says_where(tiny_map: ComputeNetworkMap) -> None:
    # 40 jobs of 8 A100 for an hour, all at once; AA-dc (4) cannot take one, BB-hub (16) and
    # CC-hub (32) take six at a time.
    jobs = [_training(f"t{i}", 0.0, volume_gb=10.0, gpus=8) for i in range(40)]
    run = simulate_flows(tiny_map, jobs, policy="earliest", max_wait_s=HOUR)
    accepted = [o for o in run.outcomes if o.accepted]
    assert {o.site for o in accepted} == {"BB-hub", "CC-hub"}
    # Two rounds of six fit within the hour's wait (starting at 0 or so and at about 1 h).
    assert 6 <= len(accepted) <= 12
    rejected = [o for o in run.outcomes if not o.accepted]
    assert rejected and {o.blocker for o in rejected} == {"accelerators"}


def test_holding_transfers_for_the_whole_life_blocks_what_windows_let_through(
    tiny_map: ComputeNetworkMap,
) -> None:
    # Ten jobs at once, each staging 100 GB at up to 60 Gbps from AA-idle, whose attachment
    # links carry 100 Gbps: held only for its window, each transfer takes 14 s, and all ten
    # start within two minutes; held for the job's hour, the first transfer keeps the link of
    # the best route, and the others cannot start within their 10 minutes.
    jobs = [
        _training(f"t{i}", 0.0, volume_gb=100.0, gpus=1, source=Endpoint(site="AA-idle"))
        for i in range(10)
    ]
    jobs = [
        j.model_copy(
            update={
                "flows": Flows(
                    staging=(
                        Staging(
                            source=Endpoint(site="AA-idle"), volume_gb=100.0, max_rate_gbps=60.0
                        ),
                    )
                )
            }
        )
        for j in jobs
    ]
    windows = simulate_flows(tiny_map, jobs, policy="earliest", max_wait_s=600)
    life = simulate_flows(tiny_map, jobs, policy="earliest", max_wait_s=600, whole_life=True)
    assert windows.accepted == 10
    assert max(o.wait_s for o in windows.outcomes) < 120
    assert life.accepted == 1
    assert {(o.blocker, o.where) for o in life.outcomes if not o.accepted} == {
        ("province link", "AA-idle--AA-agg1")
    }


def test_quality_is_measured_against_every_eligible_site(china: ComputeNetworkMap) -> None:
    scenario = SCENARIOS["national-training"]
    jobs = scenario.draw(china, 120, 12.0, 3)
    run = simulate_flows(
        china, jobs, policy="scarcity", waits=scenario.max_wait_s, top_n=4, quality=True
    )
    gaps = [o.quality_gap for o in run.outcomes if o.quality_gap is not None]
    assert gaps and all(g >= 0 for g in gaps)
    exact = simulate_flows(china, jobs, policy="scarcity", waits=scenario.max_wait_s, top_n=None)
    assert all(o.quality_gap is None for o in exact.outcomes)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_scenario_is_seeded_and_runs(china: ComputeNetworkMap, name: str) -> None:
    scenario = SCENARIOS[name]
    jobs = scenario.draw(china, 200, 12.0, 7)
    assert jobs == scenario.draw(china, 200, 12.0, 7)
    assert jobs != scenario.draw(china, 200, 12.0, 8)
    assert all(job.flows is not None and not job.flows.empty for job in jobs)
    run = simulate_flows(china, jobs, policy="scarcity", waits=scenario.max_wait_s)
    assert len(run.outcomes) == 200
    asked = sum(j.accelerator_count * j.duration_s / 3600 for j in jobs)
    assert 0 < run.accelerator_hours <= asked + 1e-6


def test_a_scenario_run_scales_to_the_capacity_basis() -> None:
    figures = run_one(RunSpec("inference-edge", "earliest", 1.2, 0))
    jobs = scenario_jobs("inference-edge", 0)
    assert figures.jobs == len(jobs) == SCENARIOS["inference-edge"].jobs
    assert 0 < figures.accepted <= figures.jobs
    assert figures.accelerator_hours <= figures.asked_accelerator_hours


def test_cli_runs_a_scenario_sweep_and_refuses_bad_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    assert main(["simulate", "--scenario", "nope", "--out", str(out)]) == 2
    assert "unknown scenario nope" in capsys.readouterr().err
    assert main(["simulate", "--scenario", "all", "--policies", "fast", "--out", str(out)]) == 2
    assert "unknown flow policy fast" in capsys.readouterr().err
    assert main(["simulate", "--scenario", "all", "--workers", "257", "--out", str(out)]) == 2
    assert "--workers must be 1 to 256" in capsys.readouterr().err
    code = main(
        [
            "simulate",
            "--scenario",
            "inference-edge",
            "--policies",
            "scarcity,earliest",
            "--load",
            "1.2",
            "--workers",
            "2",
            "--whole-life",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "inference-edge load 1.2: scarcity" in printed
    report = (out / "report.md").read_text()
    assert "## inference-edge" in report
    assert report.count("| scarcity | 1.2 |") == 1 and report.count("| earliest | 1.2 |") == 1
    assert report.count("| earliest, whole life | 1.2 |") == 1
    assert "against `earliest`" in report


def _figures(
    policy: str, hours: float, cost: float, energy: float, *, whole_life: bool = False
) -> RunFigures:
    return RunFigures(
        spec=RunSpec("s", policy, 1.2, 0, whole_life=whole_life),
        jobs=10,
        asked_accelerator_hours=1000.0,
        accepted=10,
        accelerator_hours=hours,
        cost_cny=cost,
        energy_kwh=energy,
        mean_wait_s=0.0,
        blockers={},
        where=[],
        wall_s=0.0,
    )


@pytest.mark.parametrize(
    ("ours", "wins"),
    [
        ((110.0, 100.0, 100.0), True),  # 10% more accelerator-hours
        ((109.0, 50.0, 50.0), True),  # as many, far cheaper
        ((100.0, 85.0, 100.0), True),  # as many, 15% cheaper
        ((100.0, 100.0, 85.0), True),  # as many, 15% less energy
        ((100.0, 86.0, 86.0), False),
        ((99.0, 50.0, 50.0), False),  # fewer accelerator-hours, however cheap
    ],
)
def test_the_verdict_rule(ours: tuple[float, float, float], wins: bool) -> None:
    runs = [
        _figures("scarcity", *ours),
        _figures("earliest", 100.0, 100.0, 100.0),
        _figures("random", 90.0, 10.0, 10.0),
        _figures("earliest", 10.0, 1.0, 1.0, whole_life=True),
    ]
    (verdict,) = verdicts(runs)
    assert verdict.baseline == "earliest"
    assert verdict.wins is wins


def _gpus(job_id: str, arrival: float, gpus: int) -> TraceJob:
    return TraceJob(
        id=job_id,
        arrival_s=arrival,
        duration_s=HOUR,
        source_province="AA",
        cpu=1.0,
        memory_gib=1.0,
        accelerator_model="A100",
        accelerator_count=gpus,
    )


def test_a_batch_window_plans_its_arrivals_together_the_largest_share_first(
    tiny_map: ComputeNetworkMap,
) -> None:
    # CC-hub has 32 A100, BB-hub 16: a 32-GPU job fits CC-hub only, and only when the 4-GPU
    # job that came 10 s before it went elsewhere.
    jobs = [_gpus("small", 0.0, 4), _gpus("big", 10.0, 32)]

    def placed(policy: str, window: float) -> dict[str, tuple[str | None, float | None]]:
        run = simulate_flows(tiny_map, jobs, policy=policy, max_wait_s=120, batch_window_s=window)
        return {o.job_id: (o.site, o.start_s) for o in run.outcomes}

    assert placed("scarcity", 0) == {"small": ("CC-hub", 0.0), "big": (None, None)}
    assert placed("scarcity", 60) == {"small": ("BB-hub", 60.0), "big": ("CC-hub", 60.0)}
    # The baselines plan a window in arrival order.
    assert placed("earliest", 60) == {"small": ("CC-hub", 60.0), "big": (None, None)}
    with pytest.raises(ValueError, match="batch_window_s"):
        simulate_flows(tiny_map, jobs, policy="earliest", batch_window_s=-1)


def test_the_example_trace_with_flows_plans_on_china(china: ComputeNetworkMap) -> None:
    jobs = read_trace(EXAMPLE)
    run = simulate_flows(china, jobs, policy="scarcity", max_wait_s=HOUR)
    by_id = {o.job_id: o for o in run.outcomes}
    assert all(o.accepted for o in run.outcomes)
    # 4 TB at up to 10 Gbps: at least 3,200 s of staging unless it trains where the data is.
    train = by_id["train-zj"]
    assert train.site == "SH-hub-qingpu" or train.staging_s >= 3200
    assert by_id["chat-sh"].staging_s == 0 and by_id["chat-sh"].delivery_s == 0


def test_cli_plans_a_trace_with_flows_and_the_constant_replay_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = str(EXAMPLE)
    out = tmp_path / "report"
    assert main(["simulate", "--trace", example, "--out", str(out)]) == 2
    assert "job 'train-zj' states flows" in capsys.readouterr().err
    assert main(["simulate", "--scenario", "all", "--flows", "--out", str(out)]) == 2
    assert "--flows plans a trace file" in capsys.readouterr().err
    args = ["simulate", "--flows", "--trace", example, "--policies", "scarcity,earliest"]
    code = main(
        [*args, "--load", "1", "--workers", "1", "--queue-limit", "3600", "--out", str(out)]
    )
    assert code == 0
    report = (out / "report.md").read_text()
    assert f"## {example}" in report
    assert "every job waiting at most 3600 s; 3 jobs" in report
    assert report.count("| scarcity | 1 | 3 |") == 1
    assert "--flows --trace" in report
    bad = tmp_path / "bad.jsonl"
    record = json.loads(EXAMPLE.read_text().splitlines()[0])
    record["flows"]["staging"][0]["source"] = {"site": "nowhere"}
    bad.write_text(json.dumps(record) + "\n")
    assert main(["simulate", "--flows", "--trace", str(bad), "--out", str(out)]) == 2
    assert "unknown site 'nowhere'" in capsys.readouterr().err


def test_place_refuses_a_request_with_flows_naming_where_it_is_planned(
    capsys: pytest.CaptureFixture[str],
) -> None:
    example = EXAMPLE.parents[1] / "requests/staged-training.json"
    assert main(["place", "--map", "china", "--request", str(example)]) == 2
    error = capsys.readouterr().err
    assert f"{example}: flows" in error and "simulate --flows" in error, error
