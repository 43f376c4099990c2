"""End to end on the real local Slurm (scripts/slurm.sh): a tenant submits over REST, the brain
places the request on a Slurm site, the job runs in Slurm, the request goes through running to
completed, its usage record matches Slurm's accounting, and its reservation is released.
A two-node gang that runs on both nodes and is metered for both; a quarter of a GPU that runs
on its share of the GPU's shards and is metered at its share. Suspend and resume of a
running job, cancel, a failed job retried with its attempts visible,
and an attempt followed by another brain instance after the first one stopped.

Every Slurm job a test causes is cancelled at the end of the module.
"""

import tempfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import update

from cnbrain.domain.backend_ref import BackendRef
from cnbrain.execution import JobAccounting, JobState, SlurmBackend, backend_for
from cnbrain.storage import jobs
from cnbrain.storage.models import JobRecord
from tests.execution.execution_brain import (
    SLURM,
    Brain,
    cancel_every_job,
    job_request,
    running_brain,
    site_registration,
)
from tests.execution.local_slurm import CREDENTIALS, TOKEN_FILE, credential_store, start_slurm
from tests.polling import until

pytestmark = pytest.mark.asyncio(loop_scope="module")

SITE = "AA-slurm"
UNREACHABLE = "http://127.0.0.1:9"
"""A Slurm site that cannot be reached (nothing listens there)."""
GPU_JOB = {"cpu": 1, "memory_gib": 0.25, "accelerator": {"model": "A100", "count": 1}}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def brain(tmp_path_factory: Any) -> AsyncIterator[Brain]:
    start_slurm()
    down = {"url": UNREACHABLE, "token_file": str(TOKEN_FILE)}
    credentials = {**CREDENTIALS, "slurm-down": down}
    async with running_brain(tmp_path_factory.mktemp("slurm"), credentials=credentials) as running:
        await running.register_site(site_registration(SITE, execution=SLURM))
        try:
            yield running
        finally:
            await cancel_every_job(running)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slurm() -> AsyncIterator[SlurmBackend]:
    backend = backend_for(BackendRef.model_validate(SLURM), credentials=credential_store())
    assert isinstance(backend, SlurmBackend)
    try:
        yield backend
    finally:
        await backend.aclose()


async def final_accounting(slurm: SlurmBackend, job_id: str) -> JobAccounting:
    async def probe() -> JobAccounting | None:
        record = await slurm.accounting(job_id)
        if record is None or record.started_at is None or record.ended_at is None:
            return None  # slurmdbd may record a job's end a moment before its allocation
        return record

    return await until(probe, f"Slurm's accounting of job {job_id}")


def job_output(name: str) -> Path:
    """A file a job may write (it runs as the REST user), in a directory it may reach."""
    out = Path(tempfile.mkdtemp(prefix="cnbrain-job-")) / name
    out.parent.chmod(0o755)
    out.touch()
    out.chmod(0o666)
    return out


async def usage_record(brain: Brain, user: str, request_id: str) -> dict[str, Any]:
    """The usage record of `request_id`, once there is one."""

    async def record() -> dict[str, Any] | None:
        page = (await brain.call(user, "GET", "/v1/usage")).json()["items"]
        return next((u for u in page if u["request"] == request_id), None)

    return await until(record, "the usage record")


async def test_a_job_runs_in_slurm_to_completion_metered_from_its_accounting(
    brain: Brain, slurm: SlurmBackend
) -> None:
    tenant, user = await brain.tenant_user("e2e")
    body = job_request(
        SITE,
        resources=GPU_JOB,
        duration_hours=0.05,
        job={
            "command": 'echo "attempt $CNBRAIN_ATTEMPT on $CUDA_VISIBLE_DEVICES"; sleep 3',
            "max_attempts": 1,
        },
    )
    made = await brain.submit(user, body)
    assert made["state"] == "placed" and made["site"] == SITE
    assert len(await brain.held(made["id"])) == 1
    seen = [
        "placed",
        *await brain.states_until(user, made["id"], "completed", "failed", timeout_s=60),
    ]
    assert seen[-1] == "completed", (seen, (await brain.view(user, made["id"]))["reason"])
    assert "running" in seen and set(seen) <= {"placed", "submitted", "running", "completed"}
    order = ["placed", "submitted", "running", "completed"]
    assert seen == sorted(seen, key=order.index)
    assert await brain.held(made["id"]) == []
    quota = (await brain.call(user, "GET", f"/v1/tenants/{tenant}/quota")).json()
    assert quota["used_cpu_cores"] == 0 and quota["used_accelerators"] == 0

    [attempt] = await brain.attempts(user, made["id"])
    assert (attempt["backend"], attempt["state"], attempt["exit_code"]) == ("slurm", "completed", 0)
    job_id = attempt["backend_job_id"]
    assert job_id.isdigit()
    status = await slurm.status(job_id)
    assert status.state is JobState.COMPLETED and status.request_id == made["id"]

    audit = (await brain.as_admin("GET", "/v1/audit", params={"limit": 500})).json()["items"]
    actions = [e["action"] for e in reversed(audit) if e["object_id"] == made["id"]]
    assert actions[-3:] == ["job.submitted", "request.running", "request.completed"], actions

    accounting = await final_accounting(slurm, job_id)

    async def record() -> dict[str, Any] | None:
        page = (await brain.call(user, "GET", "/v1/usage")).json()["items"]
        return page[0] if page else None

    usage = await until(record, "the usage record")
    assert usage["backend_job_id"] == job_id and usage["attempt"] == 1
    assert usage["simulated"] is False and "slurmdbd" in usage["source"]
    assert accounting.started_at is not None and accounting.ended_at is not None
    assert datetime.fromisoformat(usage["started_at"]) == accounting.started_at
    assert datetime.fromisoformat(usage["ended_at"]) == accounting.ended_at
    assert usage["elapsed_s"] == accounting.elapsed_s >= 3
    assert (usage["cpus"], usage["memory_mib"], usage["gpus"]) == (
        accounting.cpus,
        accounting.memory_mib,
        accounting.gpus,
    )
    assert (usage["cpus"], usage["memory_mib"], usage["gpus"]) == (1, 256, 1)
    hours = accounting.elapsed_s / 3600
    # site_registration's prices: 0.05 per core-hour, 0.01 per GiB-hour, 9 per A100-hour
    assert usage["compute_cost_cny"] == pytest.approx(hours * (0.05 + 0.25 * 0.01 + 9.0))
    assert usage["accelerator_model"] == "A100"


async def test_a_two_node_gang_runs_on_two_slurm_nodes_and_is_metered_for_both(
    brain: Brain, slurm: SlurmBackend
) -> None:
    tenant, user = await brain.tenant_user("e2e-gang")
    out = job_output("nodes.out")
    body = job_request(
        SITE,
        resources={**GPU_JOB, "nodes": 2},
        duration_hours=0.05,
        job={
            "command": "set -e; "
            f"srun sh -c 'echo \"$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES\"' >> {out}; sleep 3",
            "max_attempts": 1,
        },
    )
    made = await brain.submit(user, body)
    assert made["state"] == "placed" and made["site"] == SITE
    quota = (await brain.call(user, "GET", f"/v1/tenants/{tenant}/quota")).json()
    assert (quota["used_cpu_cores"], quota["used_accelerators"]) == (2, 2)
    seen = await brain.states_until(user, made["id"], "completed", "failed", timeout_s=60)
    assert seen[-1] == "completed", (seen, (await brain.view(user, made["id"]))["reason"])

    lines = sorted(out.read_text().splitlines())
    assert lines == ["node1 0", "node2 0"], lines
    [attempt] = await brain.attempts(user, made["id"])
    accounting = await final_accounting(slurm, attempt["backend_job_id"])
    assert (accounting.nodes, accounting.cpus, accounting.memory_mib, accounting.gpus) == (
        2,
        2,
        512,
        2,
    )

    usage = await usage_record(brain, user, made["id"])
    assert (usage["cpus"], usage["memory_mib"], usage["gpus"]) == (2, 512, 2)
    hours = accounting.elapsed_s / 3600
    assert usage["compute_cost_cny"] == pytest.approx(hours * 2 * (0.05 + 0.25 * 0.01 + 9.0))


@pytest.mark.parametrize(
    ("name", "fraction"),
    [("milli", {"milli": 250}), ("memory", {"memory_gib": 20})],  # 20 of the A100's 80 GiB
)
async def test_a_fraction_of_a_gpu_runs_on_its_shards_and_is_metered_at_its_share(
    brain: Brain, slurm: SlurmBackend, name: str, fraction: dict[str, int]
) -> None:
    tenant, user = await brain.tenant_user(f"e2e-share-{name}")
    out = job_output(f"shards-{name}.out")
    body = job_request(
        SITE,
        resources={**GPU_JOB, "accelerator": {"model": "A100", **fraction}},
        duration_hours=0.05,
        job={"command": f'echo "$SLURM_SHARDS_ON_NODE" > {out}; sleep 3', "max_attempts": 1},
    )
    made = await brain.submit(user, body)
    assert made["state"] == "placed" and made["site"] == SITE
    quota = (await brain.call(user, "GET", f"/v1/tenants/{tenant}/quota")).json()
    assert quota["used_accelerators"] == 0.25
    seen = await brain.states_until(user, made["id"], "completed", "failed", timeout_s=60)
    assert seen[-1] == "completed", (seen, (await brain.view(user, made["id"]))["reason"])
    assert out.read_text().strip() == "25"  # a quarter of the GPU's 100 shards

    [attempt] = await brain.attempts(user, made["id"])
    accounting = await final_accounting(slurm, attempt["backend_job_id"])
    assert accounting.tres.get("gres/shard") == 25 and accounting.gpus == 0

    usage = await usage_record(brain, user, made["id"])
    hours = accounting.elapsed_s / 3600
    assert usage["accelerator_model"] == "A100"
    assert usage["accelerator_hours"] == pytest.approx(0.25 * hours)
    assert usage["compute_cost_cny"] == pytest.approx(hours * (0.05 + 0.25 * 0.01 + 0.25 * 9.0))


async def test_a_slurm_sites_nodes_are_read_from_its_scheduler(brain: Brain) -> None:
    view = (await brain.as_admin("GET", f"/v1/sites/{SITE}/nodes")).json()
    assert view["reported_error"] is None and view["pools"] == []
    assert [(n["name"], n["gpus"]) for n in view["reported"]] == [
        ("node1", {"fake": 4}),
        ("node2", {"fake": 4}),
    ]


async def test_suspend_resume_and_cancel_a_running_slurm_job(
    brain: Brain, slurm: SlurmBackend
) -> None:
    _, user = await brain.tenant_user("pause")
    made = await brain.submit(user, job_request(SITE, job={"command": "sleep 120"}))
    await brain.states_until(user, made["id"], "running", timeout_s=60)
    [attempt] = await brain.attempts(user, made["id"])
    job_id = attempt["backend_job_id"]

    paused = await brain.call(user, "POST", f"/v1/requests/{made['id']}/suspend")
    assert paused.status_code == 200, paused.text
    assert paused.json()["state"] == "suspended"
    assert (await slurm.status(job_id)).backend_state == "STOPPED"
    await brain.dispatcher.run_once()  # the dispatcher agrees with what Slurm says
    assert (await brain.view(user, made["id"]))["state"] == "suspended"
    assert len(await brain.held(made["id"])) == 1

    resumed = await brain.call(user, "POST", f"/v1/requests/{made['id']}/resume")
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["state"] == "running"
    assert (await slurm.status(job_id)).state is JobState.RUNNING

    cancelled = await brain.call(user, "POST", f"/v1/requests/{made['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert await brain.held(made["id"]) == []

    async def gone() -> bool | None:
        return True if (await slurm.status(job_id)).state is JobState.CANCELLED else None

    await until(gone, f"Slurm job {job_id} cancelled")

    async def recorded() -> str | None:
        [attempt] = await brain.attempts(user, made["id"])
        return attempt["state"] if attempt["state"] == "cancelled" else None

    await until(recorded, "the attempt recorded cancelled")
    assert (await brain.view(user, made["id"]))["state"] == "cancelled"


async def test_a_preempted_slurm_job_is_cancelled_requeued_and_runs_again_later(
    brain: Brain, slurm: SlurmBackend
) -> None:
    _, user = await brain.tenant_user("preempt")
    every_gpu = {"cpu": 1, "memory_gib": 0.25, "accelerator": {"model": "A100", "count": 4}}
    low = await brain.submit(
        user,
        job_request(SITE, resources=every_gpu, priority_class="low", job={"command": "sleep 120"}),
    )
    await brain.states_until(user, low["id"], "running", timeout_s=60)
    [first] = await brain.attempts(user, low["id"])
    urgent = await brain.submit(
        user,
        job_request(
            SITE,
            resources=every_gpu,
            priority_class="high",
            start="queue",
            max_wait_s=5,
            job={"command": "sleep 120"},
        ),
    )
    assert urgent["state"] == "queued"
    await brain.states_until(user, urgent["id"], "running", timeout_s=60)
    view = await brain.view(user, low["id"])
    assert view["state"] == "queued"
    assert view["reason"] == "preempted by a request of class high"
    assert await brain.held(low["id"]) == []
    assert (await slurm.status(first["backend_job_id"])).state is JobState.CANCELLED

    async def first_cancelled() -> bool | None:
        [attempt] = await brain.attempts(user, low["id"])
        return True if attempt["state"] == "cancelled" else None

    await until(first_cancelled, "the preempted attempt recorded cancelled")
    kinds = [kind for kind, _ in await brain.events(user, low["id"])]
    assert kinds[kinds.index("started") + 1 :][:2] == ["preempted", "queued"], kinds

    done = await brain.call(user, "POST", f"/v1/requests/{urgent['id']}/cancel")
    assert done.status_code == 200, done.text
    await brain.states_until(user, low["id"], "running", timeout_s=60)
    attempts = await brain.attempts(user, low["id"])
    assert [(a["attempt"], a["state"]) for a in attempts] == [(1, "cancelled"), (2, "running")]
    assert attempts[1]["backend_job_id"] != first["backend_job_id"]
    assert (await slurm.status(attempts[1]["backend_job_id"])).state is JobState.RUNNING
    cancelled = await brain.call(user, "POST", f"/v1/requests/{low['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert await brain.held(low["id"]) == []


async def test_a_failed_slurm_job_is_retried_and_every_attempt_shows(
    brain: Brain, slurm: SlurmBackend
) -> None:
    _, user = await brain.tenant_user("retry")
    command = 'if [ "$CNBRAIN_ATTEMPT" = 1 ]; then echo failing; exit 3; fi\nsleep 1'
    made = await brain.submit(user, job_request(SITE, job={"command": command, "max_attempts": 2}))
    seen = await brain.states_until(user, made["id"], "completed", "failed", timeout_s=60)
    assert seen[-1] == "completed", seen
    view = await brain.view(user, made["id"])
    assert "attempt 1 failed" in view["reason"] and "attempt 2 of 2 queued" in view["reason"]
    attempts = await brain.attempts(user, made["id"])
    assert [(a["attempt"], a["state"], a["exit_code"], a["site"]) for a in attempts] == [
        (1, "failed", 3, SITE),
        (2, "completed", 0, SITE),
    ]
    first, second = (a["backend_job_id"] for a in attempts)
    assert first != second
    assert (await slurm.status(first)).state is JobState.FAILED
    assert await brain.held(made["id"]) == []

    async def both() -> list[Any] | None:
        items = (await brain.call(user, "GET", "/v1/usage")).json()["items"]
        return items if len(items) == 2 else None

    records = await until(both, "a usage record per attempt")
    assert {(r["attempt"], r["backend_job_id"]) for r in records} == {(1, first), (2, second)}


async def test_slurm_unreachable_fails_with_the_reason_and_leaves_nothing_reserved(
    brain: Brain,
) -> None:
    unreachable = {**SLURM, "url": UNREACHABLE, "credential": "slurm-down", "timeout_s": 2}
    await brain.register_site(site_registration("AA-slurm-down", execution=unreachable))
    tenant, user = await brain.tenant_user("down")
    made = await brain.submit(user, job_request("AA-slurm-down", job={"max_attempts": 2}))
    await brain.states_until(user, made["id"], "failed", "completed", timeout_s=30)
    view = await brain.view(user, made["id"])
    assert view["state"] == "failed"
    assert "Slurm at http://127.0.0.1:9" in view["reason"] and "unavailable" in view["reason"]
    assert await brain.held(made["id"]) == []
    quota = (await brain.call(user, "GET", f"/v1/tenants/{tenant}/quota")).json()
    assert quota["used_active_requests"] == 0
    [attempt] = await brain.attempts(user, made["id"])
    assert attempt["state"] == "not_submitted"
    down = (await brain.as_admin("GET", "/v1/sites/AA-slurm-down/nodes")).json()
    assert down["reported"] is None and "127.0.0.1:9" in down["reported_error"]


async def test_another_instance_takes_over_a_job_whose_follower_stopped(
    brain: Brain, slurm: SlurmBackend
) -> None:
    _, user = await brain.tenant_user("takeover")
    made = await brain.submit(user, job_request(SITE, job={"command": "sleep 4"}))
    await brain.states_until(user, made["id"], "running", timeout_s=60)
    await brain.dispatcher.stop()
    second = brain.another_dispatcher()
    second.owner = "another-instance"
    try:
        await second.run_once()
        async with brain.brain.sessions() as session:
            [record] = await jobs.attempts_of(session, request_id=made["id"])
        assert record.owner == brain.dispatcher.owner  # its lease has not lapsed yet
        async with brain.brain.sessions.begin() as session:
            await session.execute(
                update(JobRecord)
                .where(JobRecord.request_id == made["id"])
                .values(lease_until=datetime.now(UTC) - timedelta(seconds=1))
            )

        async def completed() -> bool | None:
            await second.run_once()
            return True if (await brain.view(user, made["id"]))["state"] == "completed" else None

        await until(completed, "the request completed under the second instance", 60)
        async with brain.brain.sessions() as session:
            [record] = await jobs.attempts_of(session, request_id=made["id"])
        assert record.owner == "another-instance" and record.state == "completed"
        assert await brain.held(made["id"]) == []
    finally:
        await second.stop()
        await brain.dispatcher.start()
