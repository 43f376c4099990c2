"""Cancelling a request wakes the dispatcher: the request's job is cancelled on its scheduler
by the next round at once, not at the next poll (a minute away here). A SQLite file and the
in-process cache (execution_brain.py)."""

from pathlib import Path

import pytest

from cnbrain.execution import JobState
from tests.execution.execution_brain import (
    FAST_SIMULATOR,
    job_request,
    running_brain,
    site_registration,
)
from tests.polling import until

pytestmark = pytest.mark.asyncio

POLL_S = 60.0
"""Longer than the test waits for the cancellation."""


async def test_a_cancellation_wakes_the_dispatcher(tmp_path: Path) -> None:
    async with running_brain(tmp_path, embedded=True, execution_poll_s=POLL_S) as brain:
        await brain.register_site(site_registration("AA-sim", execution=FAST_SIMULATOR, cores=16))
        _, user = await brain.tenant_user()
        made = await brain.submit(user, job_request("AA-sim", duration_hours=100))

        async def running() -> bool | None:
            await brain.dispatcher.run_once()
            return True if (await brain.view(user, made["id"]))["state"] == "running" else None

        await until(running, "the job running, driven round by round", 10)
        [attempt] = await brain.attempts(user, made["id"])
        _, backend = await brain.dispatcher.backend_of("AA-sim")
        cancelled = await brain.call(user, "POST", f"/v1/requests/{made['id']}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"

        async def job_cancelled() -> bool | None:
            status = await backend.status(attempt["backend_job_id"])
            return True if status.state is JobState.CANCELLED else None

        await until(job_cancelled, "the job cancelled by the woken dispatcher", 10)
