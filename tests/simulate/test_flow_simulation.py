"""The flow simulation: jobs planned over time with their data flows, the scenario suite and
`cnbrain simulate --scenario`."""

from pathlib import Path

import pytest

from cnbrain.cli.main import main
from cnbrain.domain.enums import WorkloadClass
from cnbrain.domain.flows import Delivery, Endpoint, Flows, Staging
from cnbrain.netmap.china import china_document
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.simulate.flow_simulation import FLOW_POLICIES, simulate_flows
from cnbrain.simulate.scenario_report import RunSpec, run_one, scenario_jobs
from cnbrain.simulate.scenarios import SCENARIOS
from cnbrain.simulate.trace import TraceJob

HOUR = 3600.0
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
    assert "against `earliest`" in report
