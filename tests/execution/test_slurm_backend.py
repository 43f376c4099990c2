"""SlurmBackend against a real one-node Slurm (scripts/slurm.sh), and against no Slurm at all.

The session fixture starts the local cluster (idempotent; it installs Slurm on first use).
Jobs run as the REST user cnbrain-slurm; every job a test submits is cancelled afterwards.
"""

import asyncio
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from pydantic import HttpUrl

from cnbrain.domain.backend_ref import BackendRef
from cnbrain.execution import (
    BackendRejected,
    BackendUnavailable,
    JobAccounting,
    JobSpec,
    JobState,
    JobStatus,
    NodeReport,
    SlurmBackend,
    UnknownJob,
    backend_for,
)
from tests.execution.local_slurm import (
    CREDENTIAL,
    TOKEN_FILE,
    URL,
    USER,
    credential_store,
    start_slurm,
)
from tests.polling import until

pytestmark = pytest.mark.asyncio

STORE = credential_store()
POLL_S = 0.25


@pytest.fixture(scope="session")
def slurm_ref() -> BackendRef:
    """The local Slurm, started by `bash scripts/slurm.sh start` once per session."""
    start_slurm()
    return BackendRef(kind="slurm", url=HttpUrl(URL), user=USER, credential=CREDENTIAL)


class TrackingSlurm(SlurmBackend):
    """The real backend, remembering what it submitted so that the fixture cancels it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.submitted: list[str] = []

    async def submit(self, job: JobSpec) -> str:
        job_id = await super().submit(job)
        self.submitted.append(job_id)
        return job_id


@pytest_asyncio.fixture
async def slurm(slurm_ref: BackendRef) -> AsyncIterator[SlurmBackend]:
    backend = TrackingSlurm(
        url=URL, user=USER, token=STORE.token_source(CREDENTIAL, URL), gpu_types={"H800": "fake"}
    )
    try:
        yield backend
    finally:
        for job_id in backend.submitted:
            await backend.cancel(job_id)
        await backend.aclose()


def job(command: str, **changes: Any) -> JobSpec:
    fields: dict[str, Any] = {
        "request_id": f"req-test-{uuid.uuid4().hex[:10]}",
        "name": "test",
        "command": command,
        "cpus": 1,
        "memory_mib": 100,
        "time_limit_s": 60,
        "output_path": "/dev/null",
    }
    fields.update(changes)
    return JobSpec.model_validate(fields)


async def state_reached(
    backend: SlurmBackend, job_id: str, *states: JobState, timeout_s: float = 30.0
) -> JobStatus:
    async def probe() -> JobStatus | None:
        status = await backend.status(job_id)
        return status if status.state in states else None

    return await until(
        probe, f"job {job_id} reaching {[s.value for s in states]}", timeout_s, every_s=POLL_S
    )


async def final_accounting(
    backend: SlurmBackend, job_id: str, *, started: bool = True
) -> JobAccounting:
    """The job's accounting record once it holds the job's end, and its start unless the job
    never `started` (slurmdbd lags a little, and may record the end before the start)."""

    async def probe() -> JobAccounting | None:
        record = await backend.accounting(job_id)
        if record is None or record.ended_at is None:
            return None
        return None if started and record.started_at is None else record

    return await until(probe, f"the accounting of job {job_id}", every_s=POLL_S)


def processes_of(marker: str) -> dict[int, str]:
    """pid -> state letter of the processes whose command line contains `marker`."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if marker in command:
            found[int(entry.name)] = stat.rsplit(")", 1)[1].split()[0]
    return found


async def controller_time_limit_min(job_id: str) -> int:
    """The job's time limit in minutes, read from slurmrestd directly."""
    headers = {
        "X-SLURM-USER-NAME": USER,
        "X-SLURM-USER-TOKEN": TOKEN_FILE.read_text().strip(),
    }
    async with httpx.AsyncClient(base_url=URL, headers=headers, timeout=10) as client:
        body = (await client.get(f"/slurm/v0.0.38/job/{job_id}")).json()
    return int(body["jobs"][0]["time_limit"])


# --- a job's life -------------------------------------------------------------------------------


async def test_a_short_job_runs_to_completion_and_accounting_matches(
    slurm: SlurmBackend,
) -> None:
    spec = job("sleep 3")
    job_id = await slurm.submit(spec)
    assert job_id.isdigit()
    seen = [status async for status in slurm.watch([job_id], interval_s=POLL_S)]
    states = [status.state for status in seen]
    assert states[0] in (JobState.PENDING, JobState.RUNNING)
    assert JobState.RUNNING in states
    assert states[-1] is JobState.COMPLETED
    done = seen[-1]
    assert done.request_id == spec.request_id
    assert done.exit_code == 0 and done.signal is None
    assert done.started_at is not None and done.ended_at is not None

    record = await final_accounting(slurm, job_id)
    assert record.state is JobState.COMPLETED
    assert record.request_id == spec.request_id
    assert record.started_at == done.started_at
    assert record.ended_at == done.ended_at
    assert record.elapsed_s == (done.ended_at - done.started_at).total_seconds()
    assert 2 <= record.elapsed_s <= 6
    assert (record.cpus, record.memory_mib, record.gpus) == (1, 100, 0)
    assert record.tres["node"] == 1
    assert record.exit_code == 0
    assert "slurmdbd" in record.source


async def test_a_failing_job_is_reported_failed_with_its_exit_code(slurm: SlurmBackend) -> None:
    job_id = await slurm.submit(job("echo about to fail\nexit 3"))
    failed = await state_reached(slurm, job_id, JobState.FAILED, JobState.COMPLETED)
    assert failed.state is JobState.FAILED
    assert failed.exit_code == 3
    assert failed.reason == "NonZeroExitCode"
    record = await final_accounting(slurm, job_id)
    assert record.state is JobState.FAILED
    assert record.exit_code == 3


async def test_gpus_are_allocated_from_the_nodes_gres(slurm: SlurmBackend, tmp_path: Path) -> None:
    output = Path(f"/tmp/cnbrain-test-{uuid.uuid4().hex}.out")  # written as the REST user
    try:
        job_id = await slurm.submit(
            job('echo "$CUDA_VISIBLE_DEVICES"', gpus=2, gpu_type="H800", output_path=str(output))
        )
        done = await state_reached(slurm, job_id, JobState.COMPLETED, JobState.FAILED)
        assert done.state is JobState.COMPLETED, done.message
        assert output.read_text().strip() == "0,1"
        record = await final_accounting(slurm, job_id)
        assert record.gpus == 2
        assert record.tres["gres/gpu"] == 2
    finally:
        output.unlink(missing_ok=True)


async def test_the_node_list_shows_every_node_with_its_gpus_and_what_jobs_hold(
    slurm: SlurmBackend,
) -> None:
    job_id = await slurm.submit(job("sleep 30", gpus=3, gpu_type="H800"))
    try:
        await state_reached(slurm, job_id, JobState.RUNNING)

        async def held() -> list[NodeReport] | None:
            nodes = await slurm.nodes()
            return nodes if sum(n.gpus_used.get("fake", 0) for n in nodes) == 3 else None

        nodes = await until(held, "the node list showing the job's 3 GPUs")
        assert [n.name for n in nodes] == ["node1", "node2"]
        assert all(n.gpus == {"fake": 4} and n.cpus >= 1 for n in nodes)
        assert sorted(sum(n.free_gpus.values()) for n in nodes) == [1, 4]
    finally:
        await slurm.cancel(job_id)


# --- suspend, resume, cancel --------------------------------------------------------------------


async def test_suspend_stops_the_jobs_processes_and_resume_lets_them_run(
    slurm: SlurmBackend,
) -> None:
    marker = f"sleep 60.{uuid.uuid4().int % 10**6:06d}"
    job_id = await slurm.submit(job(marker, time_limit_s=120))
    await state_reached(slurm, job_id, JobState.RUNNING)

    async def sleep_started() -> dict[int, str] | None:
        return processes_of(marker) or None

    await until(sleep_started, "the job's sleep process", every_s=POLL_S)
    assert await controller_time_limit_min(job_id) == 2

    await slurm.suspend(job_id)
    suspended = await slurm.status(job_id)
    assert suspended.state is JobState.SUSPENDED
    assert suspended.backend_state == "STOPPED"
    assert set(processes_of(marker).values()) == {"T"}
    await slurm.suspend(job_id)  # again: a no-op

    await asyncio.sleep(0.5)
    await slurm.resume(job_id)
    resumed = await slurm.status(job_id)
    assert resumed.state is JobState.RUNNING
    assert "T" not in set(processes_of(marker).values())
    # The stopped time (under a minute) was given back to the time limit.
    assert await controller_time_limit_min(job_id) == 3
    await slurm.resume(job_id)  # running: a no-op

    await slurm.cancel(job_id)
    cancelled = await state_reached(slurm, job_id, JobState.CANCELLED)
    assert cancelled.ended_at is not None


async def test_cancel_ends_pending_and_running_jobs(slurm: SlurmBackend) -> None:
    whole_node = await slurm.submit(job("sleep 60", cpus=os.cpu_count() or 2))
    await state_reached(slurm, whole_node, JobState.RUNNING)
    queued = await slurm.submit(job("sleep 60"))
    pending = await state_reached(slurm, queued, JobState.PENDING)
    assert pending.started_at is None

    with pytest.raises(BackendRejected, match="only a running job can be suspended"):
        await slurm.suspend(queued)
    with pytest.raises(BackendRejected, match="only a suspended job can be resumed"):
        await slurm.resume(queued)

    await slurm.cancel(queued)
    await slurm.cancel(whole_node)
    for job_id in (queued, whole_node):
        assert (await state_reached(slurm, job_id, JobState.CANCELLED)).ended_at is not None
    await slurm.cancel(whole_node)  # final already: a no-op
    assert (await slurm.status(queued)).started_at is None
    never_ran = await final_accounting(slurm, queued, started=False)
    assert never_ran.state is JobState.CANCELLED
    assert never_ran.started_at is None and never_ran.cpus == 0


# --- refusals and failures ----------------------------------------------------------------------


async def test_slurm_rejects_what_the_node_does_not_have(slurm: SlurmBackend) -> None:
    with pytest.raises(BackendRejected, match="configuration not available"):
        await slurm.submit(job("true", cpus=64))
    with pytest.raises(BackendRejected, match="refused the job"):
        await slurm.submit(job("true", gpus=1, gpu_type="A100"))


async def test_unknown_jobs(slurm: SlurmBackend) -> None:
    with pytest.raises(UnknownJob):
        await slurm.status("987654321")
    with pytest.raises(UnknownJob):
        await slurm.cancel("987654321")
    with pytest.raises(UnknownJob, match="positive integer"):
        await slurm.status("../ping")
    assert await slurm.accounting("987654321") is None


async def test_a_refused_token_makes_the_backend_unavailable(slurm_ref: BackendRef) -> None:
    async with SlurmBackend(url=URL, user=USER, token=lambda: "not-a-token") as backend:
        with pytest.raises(BackendUnavailable):
            await backend.status("1")
        with pytest.raises(BackendUnavailable):
            await backend.submit(job("true"))


async def test_backend_for_the_local_cluster_answers_a_ping(slurm_ref: BackendRef) -> None:
    backend = backend_for(slurm_ref, credentials=STORE)
    assert isinstance(backend, SlurmBackend)
    async with backend:
        await backend.ping()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_an_unreachable_url_raises_backend_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with SlurmBackend(url=url, user=USER, token=lambda: "unused") as backend:
        with pytest.raises(BackendUnavailable, match=url):
            await backend.status("1")
        with pytest.raises(BackendUnavailable):
            await backend.submit(job("true"))
        with pytest.raises(BackendUnavailable):
            await backend.accounting("1")


async def test_a_server_that_never_answers_times_out_as_unavailable() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # accepts connections in the kernel; never answers
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        async with SlurmBackend(url=url, user=USER, token=lambda: "t", timeout_s=0.3) as backend:
            started = time.monotonic()
            with pytest.raises(BackendUnavailable, match="timed out"):
                await backend.status("1")
            assert time.monotonic() - started < 3
