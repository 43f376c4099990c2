"""The simulator backend on a manual clock: lifecycles, suspend/resume/cancel, accounting, watch."""

import pytest

from cnbrain.domain.backend_ref import BackendRef
from cnbrain.execution import (
    BackendRejected,
    ClusterBackend,
    JobSpec,
    JobState,
    ManualClock,
    SimulatedBackend,
    UnknownJob,
    backend_for,
)
from cnbrain.execution.simulator import simulated_run

pytestmark = pytest.mark.asyncio


def spec(command: str = "sleep 10", **changes: object) -> JobSpec:
    fields: dict[str, object] = {
        "request_id": "req-sim",
        "name": "train",
        "command": command,
        "cpus": 2,
        "memory_mib": 1024,
        "time_limit_s": 60,
    }
    fields.update(changes)
    return JobSpec.model_validate(fields)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sim(clock: ManualClock) -> SimulatedBackend:
    return SimulatedBackend(clock=clock, queue_delay_s=2)


async def test_a_job_waits_in_the_queue_runs_its_sleeps_and_completes(
    clock: ManualClock, sim: SimulatedBackend
) -> None:
    job_id = await sim.submit(spec("echo start\nsleep 3; sleep 7 && true"))
    assert job_id.startswith("sim-")
    assert (await sim.status(job_id)).state is JobState.PENDING
    clock.advance(2)
    running = await sim.status(job_id)
    assert running.state is JobState.RUNNING
    assert running.exit_code is None and running.ended_at is None
    clock.advance(9.9)
    assert (await sim.status(job_id)).state is JobState.RUNNING
    clock.advance(0.2)
    done = await sim.status(job_id)
    assert done.state is JobState.COMPLETED
    assert done.exit_code == 0
    assert done.started_at is not None and done.ended_at is not None
    assert done.submitted_at is not None
    assert (done.started_at - done.submitted_at).total_seconds() == pytest.approx(2)
    assert (done.ended_at - done.started_at).total_seconds() == pytest.approx(10)
    assert done.request_id == "req-sim"


async def test_every_status_message_names_the_simulator(
    clock: ManualClock, sim: SimulatedBackend
) -> None:
    job_id = await sim.submit(spec("sleep 1"))
    messages = [(await sim.status(job_id)).message]
    for _ in range(3):
        clock.advance(1.5)
        messages.append((await sim.status(job_id)).message)
    assert all(message.startswith("simulated job ") for message in messages)
    assert all("simulator" in message for message in messages)


async def test_exit_n_fails_the_job_with_that_code_after_its_sleeps(
    clock: ManualClock, sim: SimulatedBackend
) -> None:
    job_id = await sim.submit(spec("sleep 4\nexit 3\nsleep 100"))
    clock.advance(2 + 3.9)
    assert (await sim.status(job_id)).state is JobState.RUNNING
    clock.advance(0.1)
    failed = await sim.status(job_id)
    assert failed.state is JobState.FAILED
    assert failed.exit_code == 3
    accounting = await sim.accounting(job_id)
    assert accounting is not None
    assert accounting.exit_code == 3
    assert accounting.elapsed_s == pytest.approx(4)


async def test_a_run_longer_than_the_time_limit_times_out_at_the_limit(
    clock: ManualClock, sim: SimulatedBackend
) -> None:
    job_id = await sim.submit(spec("sleep 500", time_limit_s=60))
    clock.advance(1000)
    status = await sim.status(job_id)
    assert status.state is JobState.TIMEOUT
    assert status.exit_code is None
    assert status.started_at is not None and status.ended_at is not None
    assert (status.ended_at - status.started_at).total_seconds() == pytest.approx(60)


async def test_the_run_time_comes_from_sleeps_else_the_estimate_else_the_time_limit() -> None:
    assert simulated_run(spec("sleep 2\nsleep .5s")) == (2.5, 0)
    assert simulated_run(spec("python train.py", expected_runtime_s=42)) == (42, 0)
    assert simulated_run(spec("python train.py")) == (60, 0)
    assert simulated_run(spec("exit 7")) == (60, 7)
    assert simulated_run(spec("sleep 1; exit")) == (1, 0)


async def test_suspend_freezes_progress_and_resume_goes_on(
    clock: ManualClock, sim: SimulatedBackend
) -> None:
    job_id = await sim.submit(spec("sleep 10", time_limit_s=20))
    clock.advance(2 + 4)
    await sim.suspend(job_id)
    await sim.suspend(job_id)  # again: a no-op
    clock.advance(100)  # far past the time limit: suspended time does not count
    assert (await sim.status(job_id)).state is JobState.SUSPENDED
    await sim.resume(job_id)
    await sim.resume(job_id)  # again: a no-op
    clock.advance(5.9)
    assert (await sim.status(job_id)).state is JobState.RUNNING
    clock.advance(0.1)
    done = await sim.status(job_id)
    assert done.state is JobState.COMPLETED
    accounting = await sim.accounting(job_id)
    assert accounting is not None
    assert accounting.suspended_s == pytest.approx(100)
    assert accounting.elapsed_s == pytest.approx(110)
    assert accounting.cpu_time_s == pytest.approx(10 * 2)


async def test_only_a_running_job_can_be_suspended_and_only_a_suspended_one_resumed(
    clock: ManualClock, sim: SimulatedBackend
) -> None:
    job_id = await sim.submit(spec("sleep 5"))
    with pytest.raises(BackendRejected, match="pending"):
        await sim.suspend(job_id)
    with pytest.raises(BackendRejected, match="pending"):
        await sim.resume(job_id)
    clock.advance(2)
    await sim.resume(job_id)  # running: a no-op
    clock.advance(10)
    with pytest.raises(BackendRejected, match="completed"):
        await sim.suspend(job_id)


async def test_cancel_ends_pending_running_and_suspended_jobs(
    clock: ManualClock, sim: SimulatedBackend
) -> None:
    pending, running, suspended = [await sim.submit(spec("sleep 30")) for _ in range(3)]
    await sim.cancel(pending)
    clock.advance(3)
    await sim.suspend(suspended)
    clock.advance(1)
    await sim.cancel(running)
    await sim.cancel(suspended)
    for job_id in (pending, running, suspended):
        status = await sim.status(job_id)
        assert status.state is JobState.CANCELLED
        assert status.ended_at is not None
    await sim.cancel(running)  # final already: a no-op
    never_ran = await sim.accounting(pending)
    assert never_ran is not None
    assert never_ran.started_at is None
    assert never_ran.elapsed_s == 0 and never_ran.cpus == 0 and never_ran.tres == {}
    ran = await sim.accounting(running)
    assert ran is not None and ran.elapsed_s == pytest.approx(2) and ran.cpus == 2
    held = await sim.accounting(suspended)
    assert held is not None and held.suspended_s == pytest.approx(1)


async def test_accounting_records_resources_and_names_the_simulator(
    clock: ManualClock, sim: SimulatedBackend
) -> None:
    job_id = await sim.submit(spec("sleep 5", gpus=4, gpu_type="H800", memory_mib=4096))
    running = await sim.accounting(job_id)
    assert running is not None and running.state is JobState.PENDING
    clock.advance(10)
    record = await sim.accounting(job_id)
    assert record is not None
    assert record.state is JobState.COMPLETED
    assert (record.cpus, record.memory_mib, record.gpus) == (2, 4096, 4)
    assert record.tres == {"cpu": 2, "mem": 4096, "node": 1, "gres/gpu": 4}
    assert record.exit_code == 0
    assert "simulat" in record.source
    assert record.request_id == "req-sim"


async def test_unknown_jobs(sim: SimulatedBackend) -> None:
    with pytest.raises(UnknownJob):
        await sim.status("sim-404")
    with pytest.raises(UnknownJob):
        await sim.cancel("42")
    assert await sim.accounting("sim-404") is None


async def test_watch_yields_each_change_once_and_stops_when_all_are_final(
    clock: ManualClock, sim: SimulatedBackend
) -> None:
    quick = await sim.submit(spec("sleep 1"))
    failing = await sim.submit(spec("sleep 3\nexit 2"))
    seen = [(s.job_id, s.state) async for s in sim.watch([quick, failing, quick], interval_s=1)]
    assert seen == [
        (quick, JobState.PENDING),
        (failing, JobState.PENDING),
        (quick, JobState.RUNNING),
        (failing, JobState.RUNNING),
        (quick, JobState.COMPLETED),
        (failing, JobState.FAILED),
    ]
    assert clock.now() - 1_800_000_000 == pytest.approx(5)


async def test_time_scale_runs_simulated_hours_in_clock_minutes(clock: ManualClock) -> None:
    sim = SimulatedBackend(clock=clock, time_scale=60)
    job_id = await sim.submit(spec("sleep 3600", time_limit_s=7200))
    clock.advance(59)
    assert (await sim.status(job_id)).state is JobState.RUNNING
    clock.advance(1)
    done = await sim.status(job_id)
    assert done.state is JobState.COMPLETED
    assert done.started_at is not None and done.ended_at is not None
    assert (done.ended_at - done.started_at).total_seconds() == pytest.approx(3600)


async def test_the_simulated_cluster_rejects_what_it_does_not_have(clock: ManualClock) -> None:
    sim = SimulatedBackend(clock=clock, max_cpus=8, max_gpus=2, gpu_types={"A100"})
    with pytest.raises(BackendRejected, match="asks 16 CPUs"):
        await sim.submit(spec(cpus=16))
    with pytest.raises(BackendRejected, match="asks 4 GPUs"):
        await sim.submit(spec(gpus=4, gpu_type="A100"))
    with pytest.raises(BackendRejected, match="no GPU type 'H800'"):
        await sim.submit(spec(gpus=1, gpu_type="H800"))
    assert (await sim.submit(spec(gpus=2, gpu_type="A100"))).startswith("sim-")


async def test_backend_for_a_simulator_ref_builds_a_simulator(clock: ManualClock) -> None:
    backend = backend_for(BackendRef(kind="simulator", time_scale=10), clock=clock)
    assert isinstance(backend, SimulatedBackend)
    assert isinstance(backend, ClusterBackend)
    async with backend as sim:
        job_id = await sim.submit(spec("sleep 100", time_limit_s=200))
        clock.advance(10)
        assert (await sim.status(job_id)).state is JobState.COMPLETED
