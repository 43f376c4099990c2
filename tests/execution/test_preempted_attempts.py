"""Preempted attempts of a request's job through the regional brain, on a simulated site, on
real PostgreSQL and Redis: each is listed with the reason `preempted`, and none counts
toward the job's `max_attempts`.

The simulator runs an hour per second; the job here holds its allocation for 100 hours, so
it runs until it is preempted or cancelled.
"""

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.execution.execution_brain import (
    FAST_SIMULATOR,
    Brain,
    job_request,
    running_brain,
    site_registration,
)
from tests.polling import until

pytestmark = pytest.mark.asyncio(loop_scope="module")

SITE = "AA-pre"
"""A site of 2 cores: the job takes it whole, and so does the request that preempts it."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def brain(tmp_path_factory: Any) -> AsyncIterator[Brain]:
    async with running_brain(
        tmp_path_factory.mktemp("preempted"), admission_interval_s=0.2
    ) as running:
        await running.register_site(
            site_registration(SITE, execution=FAST_SIMULATOR, cores=2, a100=0)
        )
        yield running


def _whole_site(**changes: Any) -> dict[str, Any]:
    return job_request(SITE, resources={"cpu": 2, "memory_gib": 0.5}, **changes)


async def _attempts_until(
    brain: Brain, token: str, request_id: str, done: Any, what: str
) -> list[dict[str, Any]]:
    async def probe() -> list[dict[str, Any]] | None:
        attempts = await brain.attempts(token, request_id)
        return attempts if done(attempts) else None

    return await until(probe, what)


async def test_a_job_preempted_as_often_as_its_max_attempts_still_runs_and_retries(
    brain: Brain,
) -> None:
    _, user = await brain.tenant_user()
    job = _whole_site(duration_hours=100, priority_class="low", job={"max_attempts": 3})
    low = await brain.submit(user, job)
    assert low["state"] == "placed", low
    for attempt in (1, 2, 3):
        await _attempts_until(
            brain,
            user,
            low["id"],
            lambda a, n=attempt: len(a) == n and a[-1]["state"] == "running",
            f"attempt {attempt} running",
        )
        high = await brain.submit(
            user, _whole_site(job=None, start="queue", priority_class="high", max_wait_s=20)
        )
        await brain.states_until(user, high["id"], "placed")
        ended = await _attempts_until(
            brain,
            user,
            low["id"],
            lambda a, n=attempt: a[n - 1]["state"] == "cancelled",
            f"attempt {attempt} ended",
        )
        assert ended[attempt - 1]["reason"] == "preempted"
        assert (await brain.view(user, low["id"]))["state"] == "queued"
        cancelled = await brain.call(user, "POST", f"/v1/requests/{high['id']}/cancel")
        assert cancelled.status_code == 200, cancelled.text
    # Three preemptions used none of its 3 attempts: the fourth runs, and one that the
    # scheduler ends is retried.
    [*_, fourth] = await _attempts_until(
        brain,
        user,
        low["id"],
        lambda a: len(a) == 4 and a[-1]["state"] == "running",
        "attempt 4 running",
    )
    _, backend = await brain.dispatcher.backend_of(SITE)
    await backend.cancel(fourth["backend_job_id"])
    attempts = await _attempts_until(
        brain,
        user,
        low["id"],
        lambda a: len(a) == 5 and a[-1]["state"] == "running",
        "attempt 5 running",
    )
    assert [(a["attempt"], a["state"], a["reason"]) for a in attempts] == [
        (1, "cancelled", "preempted"),
        (2, "cancelled", "preempted"),
        (3, "cancelled", "preempted"),
        (4, "cancelled", None),
        (5, "running", None),
    ]
    view = await brain.view(user, low["id"])
    assert view["state"] == "running", view
    assert view["reason"].startswith("attempt 4 was cancelled by the scheduler"), view
    assert (
        "attempt 5 (2 of 3; preempted ones do not count) queued on site AA-pre" in (view["reason"])
    )
    cancelled = await brain.call(user, "POST", f"/v1/requests/{low['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    await brain.states_until(user, low["id"], "cancelled")
    assert await brain.held(low["id"]) == []
