"""The execution lifecycle on the embedded default: a SQLite file and the in-process cache."""

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


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def brain(tmp_path_factory: Any) -> AsyncIterator[Brain]:
    async with running_brain(tmp_path_factory.mktemp("embedded"), embedded=True) as running:
        await running.register_site(
            site_registration("AA-sim", execution=FAST_SIMULATOR, cores=16, memory_gib=64)
        )
        yield running


async def test_jobs_run_retry_pause_and_are_metered_on_sqlite(brain: Brain) -> None:
    _, user = await brain.tenant_user()
    done = await brain.submit(user, job_request("AA-sim"))
    failing = await brain.submit(
        user, job_request("AA-sim", job={"command": "sleep 60; exit 2", "max_attempts": 2})
    )
    long = await brain.submit(user, job_request("AA-sim", duration_hours=100))
    assert (await brain.states_until(user, done["id"], "completed", "failed"))[-1] == "completed"
    assert (await brain.states_until(user, failing["id"], "completed", "failed"))[-1] == "failed"
    assert [a["state"] for a in await brain.attempts(user, failing["id"])] == ["failed"] * 2
    await brain.states_until(user, long["id"], "running")
    paused = await brain.call(user, "POST", f"/v1/requests/{long['id']}/suspend")
    assert paused.status_code == 200 and paused.json()["state"] == "suspended"
    resumed = await brain.call(user, "POST", f"/v1/requests/{long['id']}/resume")
    assert resumed.status_code == 200 and resumed.json()["state"] == "running"
    cancelled = await brain.call(user, "POST", f"/v1/requests/{long['id']}/cancel")
    assert cancelled.json()["state"] == "cancelled"
    for request in (done, failing, long):
        assert await brain.held(request["id"]) == []

    async def metered() -> dict[str, Any] | None:
        page = (await brain.call(user, "GET", "/v1/usage")).json()
        return page if page["totals"]["records"] == 4 else None

    page = await until(metered, "four usage records (one, two failed, one cancelled)")
    assert sorted(r["request"] for r in page["items"]) == sorted(
        [done["id"], failing["id"], failing["id"], long["id"]]
    )
    report = await brain.call(user, "GET", "/v1/usage/report", params={"format": "csv"})
    assert report.status_code == 200 and report.text.count("\n") == 2
