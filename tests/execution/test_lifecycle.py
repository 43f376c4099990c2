"""A request's job through the regional brain, on simulated sites: placed, submitted, running,
completed or failed; retries and their attempts; suspend, resume and cancel; failover when a
site's scheduler cannot be reached; metering. Real PostgreSQL and Redis (execution_brain.py).

The simulators run an hour per second, so a one-hour job takes a second.
"""

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from cnbrain.execution import JobState
from cnbrain.storage import jobs, ledger_store
from tests.execution.execution_brain import (
    FAST_SIMULATOR,
    Brain,
    job_request,
    running_brain,
    site_registration,
)
from tests.polling import until

pytestmark = pytest.mark.asyncio(loop_scope="module")


def closed_port() -> int:
    """A loopback port nothing listens on (as a stopped slurmrestd's)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def brain(tmp_path_factory: Any) -> AsyncIterator[Brain]:
    dead_url = f"http://127.0.0.1:{closed_port()}"
    credentials = {"slurm-dead": {"url": dead_url, "token_file": "/run/cnbrain-slurm/token"}}
    async with running_brain(
        tmp_path_factory.mktemp("lifecycle"), credentials=credentials
    ) as running:
        dead = {
            "kind": "slurm",
            "url": dead_url,
            "user": "cnbrain-slurm",
            "credential": "slurm-dead",
            "timeout_s": 2,
        }
        await running.register_site(
            site_registration(
                "AA-dead", execution=dead, price_core=0.0001, labels={"pool": "failover"}
            )
        )
        await running.register_site(
            site_registration("AA-sim", execution=FAST_SIMULATOR, cores=16, memory_gib=64)
        )
        yield running


async def test_a_job_runs_to_completion_and_is_metered(brain: Brain) -> None:
    tenant, user = await brain.tenant_user()
    made = await brain.submit(user, job_request("AA-sim"))
    assert made["state"] == "placed" and made["site"] == "AA-sim"
    seen = ["placed", *await brain.states_until(user, made["id"], "completed", "failed")]
    assert seen[-1] == "completed", seen
    assert seen.index("running") < seen.index("completed")
    assert set(seen) <= {"placed", "submitted", "running", "completed"}
    assert await brain.held(made["id"]) == []

    attempts = await brain.attempts(user, made["id"])
    assert [(a["attempt"], a["state"], a["site"], a["backend"]) for a in attempts] == [
        (1, "completed", "AA-sim", "simulator")
    ]
    assert attempts[0]["backend_job_id"].startswith("sim-")
    assert "simulated" in attempts[0]["message"] and attempts[0]["exit_code"] == 0
    events = await brain.events(user, made["id"])
    assert [kind for kind, _ in events] == [
        "submitted",
        "placed",
        "job_submitted",
        "started",
        "ended",
    ]
    assert events[1][1] == {"site": "AA-sim"}
    assert events[2][1] == {
        "attempt": 1,
        "site": "AA-sim",
        "backend": "simulator",
        "backend_job_id": attempts[0]["backend_job_id"],
    }
    assert events[3][1] == events[4][1] == {"attempt": 1}

    async def record() -> dict[str, Any] | None:
        page = (await brain.call(user, "GET", "/v1/usage")).json()
        return page if page["items"] else None

    page = await until(record, "the usage record")
    [usage] = page["items"]
    assert usage["request"] == made["id"] and usage["tenant"] == tenant
    assert usage["simulated"] is True and "simulator" in usage["source"]
    assert usage["elapsed_s"] == pytest.approx(3600, abs=1)
    assert (usage["cpus"], usage["memory_mib"], usage["gpus"]) == (1, 512, 0)
    # AA-sim prices: 0.05 per core-hour, 0.01 per GiB-hour; two links at 0.01 per Gbps-hour
    assert usage["compute_cost_cny"] == pytest.approx(0.05 + 0.5 * 0.01, rel=1e-3)
    assert page["totals"]["records"] == 1
    assert page["totals"]["cost_cny"] == pytest.approx(usage["cost_cny"])


async def test_a_failing_job_is_retried_then_fails_and_every_attempt_shows(brain: Brain) -> None:
    _, user = await brain.tenant_user()
    body = job_request("AA-sim", job={"command": "sleep 60\nexit 3", "max_attempts": 3})
    made = await brain.submit(user, body)
    await brain.states_until(user, made["id"], "failed", "completed")
    view = await brain.view(user, made["id"])
    assert view["state"] == "failed"
    assert "attempt 3 of 3 failed" in view["reason"] and "exit code 3" in view["reason"]
    attempts = await brain.attempts(user, made["id"])
    assert [(a["attempt"], a["state"], a["exit_code"]) for a in attempts] == [
        (1, "failed", 3),
        (2, "failed", 3),
        (3, "failed", 3),
    ]
    assert {a["site"] for a in attempts} == {"AA-sim"}
    assert await brain.held(made["id"]) == []
    told = [
        (kind, detail.get("attempt"), detail.get("state"))
        for kind, detail in await brain.events(user, made["id"])
        if kind != "started"  # a job this short may end before the dispatcher sees it run
    ]
    assert told == [
        ("submitted", None, None),
        ("placed", None, None),
        ("job_submitted", 1, None),
        ("attempt_ended", 1, "failed"),
        ("requeued", 2, None),
        ("job_submitted", 2, None),
        ("attempt_ended", 2, "failed"),
        ("requeued", 3, None),
        ("job_submitted", 3, None),
        ("attempt_ended", 3, "failed"),
        ("failed", 3, None),
    ]
    *_, (_, failed) = await brain.events(user, made["id"])
    assert failed["reason"] == view["reason"]

    async def three() -> list[Any] | None:
        page = (await brain.call(user, "GET", "/v1/usage")).json()["items"]
        return page if len(page) == 3 else None

    records = await until(three, "a usage record per attempt")
    assert sorted(r["attempt"] for r in records) == [1, 2, 3]
    assert all(r["elapsed_s"] == pytest.approx(60, abs=1) for r in records)


async def test_suspend_and_resume_a_running_job(brain: Brain) -> None:
    _, user = await brain.tenant_user()
    made = await brain.submit(user, job_request("AA-sim", duration_hours=100))
    await brain.states_until(user, made["id"], "running")
    too_early = await brain.call(user, "POST", f"/v1/requests/{made['id']}/resume")
    assert too_early.status_code == 409
    assert "only a suspended request's job can be resumed" in too_early.json()["detail"]

    paused = await brain.call(user, "POST", f"/v1/requests/{made['id']}/suspend")
    assert paused.status_code == 200, paused.text
    assert paused.json()["state"] == "suspended"
    [attempt] = await brain.attempts(user, made["id"])
    assert attempt["state"] == "suspended"
    _, backend = await brain.dispatcher.backend_of("AA-sim")
    assert (await backend.status(attempt["backend_job_id"])).state is JobState.SUSPENDED
    again = await brain.call(user, "POST", f"/v1/requests/{made['id']}/suspend")
    assert again.status_code == 409

    resumed = await brain.call(user, "POST", f"/v1/requests/{made['id']}/resume")
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["state"] == "running"
    paused_and_resumed = [
        (kind, detail["attempt"])
        for kind, detail in await brain.events(user, made["id"])
        if kind in ("suspended", "resumed")
    ]
    assert paused_and_resumed == [("suspended", 1), ("resumed", 1)]
    assert (await backend.status(attempt["backend_job_id"])).state is JobState.RUNNING
    assert len(await brain.held(made["id"])) == 1

    cancelled = await brain.call(user, "POST", f"/v1/requests/{made['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert await brain.held(made["id"]) == []

    async def job_cancelled() -> bool | None:
        status = await backend.status(attempt["backend_job_id"])
        return True if status.state is JobState.CANCELLED else None

    await until(job_cancelled, "the simulated job cancelled")

    async def attempt_cancelled() -> bool | None:
        [after] = await brain.attempts(user, made["id"])
        return True if after["state"] == "cancelled" else None

    await until(attempt_cancelled, "the attempt recorded as cancelled")


async def test_a_site_whose_scheduler_is_down_fails_over_to_another(brain: Brain) -> None:
    _, user = await brain.tenant_user()
    body = job_request(
        job={"command": "echo hi", "max_attempts": 2},
        constraints={"labels": {"pool": "failover"}},
        objective={"cost": 1, "latency": 0, "energy": 0, "balance": 0},
    )
    made = await brain.submit(user, body)
    assert made["site"] == "AA-dead"
    await brain.states_until(user, made["id"], "completed", "failed")
    view = await brain.view(user, made["id"])
    assert view["state"] == "completed" and view["site"] == "AA-dc"
    assert "placed again on site AA-dc" in view["reason"]
    assert view["decision"]["site"] == "AA-dc"
    attempts = await brain.attempts(user, made["id"])
    assert [(a["attempt"], a["site"], a["state"]) for a in attempts] == [
        (1, "AA-dead", "not_submitted"),
        (2, "AA-dc", "completed"),
    ]
    assert "unavailable" in attempts[0]["message"] and attempts[0]["backend_job_id"] is None
    assert await brain.held(made["id"]) == []
    told = dict(await brain.events(user, made["id"]))
    assert told["attempt_ended"]["state"] == "not_submitted"
    assert (told["moved"]["site"], told["moved"]["previous_site"]) == ("AA-dc", "AA-dead")
    assert told["moved"]["attempt"] == 2 and told["ended"] == {"attempt": 2}


async def test_no_other_site_fails_with_the_reason_and_keeps_nothing(brain: Brain) -> None:
    tenant, user = await brain.tenant_user()
    made = await brain.submit(user, job_request("AA-dead", job={"max_attempts": 3}))
    await brain.states_until(user, made["id"], "failed", "completed")
    view = await brain.view(user, made["id"])
    assert view["state"] == "failed"
    assert "attempt 1 on site AA-dead was not submitted" in view["reason"]
    assert "Slurm at http://127.0.0.1:" in view["reason"] and "unavailable" in view["reason"]
    assert "no other site can take it" in view["reason"]
    assert await brain.held(made["id"]) == []
    quota = (await brain.call(user, "GET", f"/v1/tenants/{tenant}/quota")).json()
    assert quota["used_cpu_cores"] == 0 and quota["used_active_requests"] == 0


async def test_a_request_with_flows_is_not_moved_off_a_site_whose_scheduler_is_down(
    brain: Brain,
) -> None:
    _, user = await brain.tenant_user()
    body = job_request(
        "AA-dead",
        start="queue",
        job={"command": "echo hi", "max_attempts": 2},
        flows={
            "delivery": [{"destination": {"province": "AA"}, "volume_gb": 450, "max_rate_gbps": 10}]
        },
    )
    made = await brain.submit(user, body)
    await brain.states_until(user, made["id"], "failed", "completed")
    view = await brain.view(user, made["id"])
    assert view["state"] == "failed" and view["site"] == "AA-dead", view
    assert "its flows were planned to that site" in view["reason"], view
    # Admitted, it took its reservation with its delivery (after its run) in one unit of
    # work; failed, it holds neither.
    assert "admitted" in [kind for kind, _ in await brain.events(user, made["id"])]
    assert await brain.held(made["id"]) == []
    async with brain.brain.sessions() as session:
        assert await ledger_store.held_flows(session, request_id=made["id"]) == []


async def test_cancel_before_the_job_runs_releases_and_the_job_never_runs(brain: Brain) -> None:
    _, user = await brain.tenant_user()
    made = await brain.submit(user, job_request("AA-sim"))
    cancelled = await brain.call(user, "POST", f"/v1/requests/{made['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert await brain.held(made["id"]) == []
    await brain.dispatcher.run_once()
    await brain.dispatcher.run_once()
    for attempt in await brain.attempts(user, made["id"]):
        assert attempt["state"] in ("cancelled", "not_submitted")
    assert (await brain.view(user, made["id"]))["state"] == "cancelled"


async def test_a_request_without_a_job_only_reserves(brain: Brain) -> None:
    _, user = await brain.tenant_user()
    body = job_request("AA-sim")
    del body["job"]
    made = await brain.submit(user, body)
    await brain.dispatcher.run_once()
    assert (await brain.view(user, made["id"]))["state"] == "placed"
    listed = await brain.call(user, "GET", f"/v1/requests/{made['id']}/attempts")
    assert listed.json() == {
        "request": made["id"],
        "state": "placed",
        "max_attempts": None,
        "attempts": [],
    }
    assert len(await brain.held(made["id"])) == 1


@pytest.mark.parametrize(
    ("job", "field"),
    [
        ({"max_attempts": 0}, "job.max_attempts"),
        ({"max_attempts": 11}, "job.max_attempts"),
        ({"command": ""}, "job.command"),
        ({"environment": {"not a name": "x"}}, "job.environment"),
        ({"name": "bad name"}, "job.name"),
        ({"shell": "bash"}, "job.shell"),
        ("sleep 1", "job"),
    ],
)
async def test_a_bad_job_is_422_naming_the_field_and_stores_nothing(
    brain: Brain, job: Any, field: str
) -> None:
    _, user = await brain.tenant_user()
    answer = await brain.call(user, "POST", "/v1/requests", json=job_request("AA-sim", job=job))
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["errors"][0]["field"] == field
    assert (await brain.call(user, "GET", "/v1/requests")).json()["items"] == []


async def test_suspend_or_resume_of_a_request_that_does_not_run_is_409(brain: Brain) -> None:
    _, user = await brain.tenant_user()
    body = job_request("AA-sim")
    del body["job"]
    made = await brain.submit(user, body)
    for verb, done in (("suspend", "suspended"), ("resume", "resumed")):
        answer = await brain.call(user, "POST", f"/v1/requests/{made['id']}/{verb}")
        assert answer.status_code == 409, answer.text
        detail = answer.json()["detail"]
        assert "is placed; only a" in detail and detail.endswith(f"job can be {done}")
    missing = await brain.call(user, "POST", "/v1/requests/req-nope/suspend")
    assert missing.status_code == 404


async def test_another_tenants_job_is_404(brain: Brain) -> None:
    _, owner = await brain.tenant_user("owner")
    _, other = await brain.tenant_user("other")
    made = await brain.submit(owner, job_request("AA-sim", duration_hours=100))
    await brain.states_until(owner, made["id"], "running")
    for method, path in (
        ("GET", f"/v1/requests/{made['id']}/attempts"),
        ("POST", f"/v1/requests/{made['id']}/suspend"),
        ("POST", f"/v1/requests/{made['id']}/resume"),
        ("POST", f"/v1/requests/{made['id']}/cancel"),
        ("GET", f"/v1/requests/{made['id']}/events"),
    ):
        answer = await brain.call(other, method, path)
        assert answer.status_code == 404, (path, answer.text)
    assert (await brain.view(owner, made["id"]))["state"] == "running"
    await brain.call(owner, "POST", f"/v1/requests/{made['id']}/cancel")


async def test_the_instance_that_submits_an_attempt_follows_it_under_a_lease(
    brain: Brain,
) -> None:
    _, user = await brain.tenant_user()
    made = await brain.submit(user, job_request("AA-sim", duration_hours=100))
    await brain.states_until(user, made["id"], "running")
    async with brain.brain.sessions() as session:
        [attempt] = await jobs.attempts_of(session, request_id=made["id"])
    assert attempt.owner == brain.dispatcher.owner
    assert attempt.lease_until is not None
    await brain.call(user, "POST", f"/v1/requests/{made['id']}/cancel")


async def test_the_operator_api_carries_a_sites_scheduler(brain: Brain) -> None:
    sites = {s["id"]: s for s in (await brain.as_admin("GET", "/v1/sites")).json()}
    assert sites["AA-dead"]["execution"]["kind"] == "slurm"
    assert sites["AA-sim"]["execution"]["kind"] == "simulator"
    assert sites["AA-sim"]["execution"]["time_scale"] == 3600

    secret = {"kind": "slurm", "url": "http://127.0.0.1:1", "user": "u", "token": "s3cret"}
    refused = await brain.as_admin(
        "POST", "/v1/sites", json=site_registration("AA-x", execution=secret)
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["field"].startswith("site.execution")
    assert "AA-x" not in {s["id"] for s in (await brain.as_admin("GET", "/v1/sites")).json()}

    slower = {**sites["AA-sim"], "execution": {"kind": "simulator", "time_scale": 7200}}
    changed = await brain.as_admin("PUT", "/v1/sites/AA-sim", json=slower)
    assert changed.status_code == 200, changed.text
    ref = await brain.dispatcher.ref_of("AA-sim")
    assert (ref.kind, ref.time_scale) == ("simulator", 7200)
    back = await brain.as_admin("PUT", "/v1/sites/AA-sim", json=sites["AA-sim"])
    assert back.status_code == 200, back.text


async def test_usage_and_the_per_tenant_report_json_and_csv(brain: Brain) -> None:
    tenant, user = await brain.tenant_user("bill")
    other, other_user = await brain.tenant_user("else")
    for token in (user, user, other_user):
        made = await brain.submit(token, job_request("AA-sim"))
        await brain.states_until(token, made["id"], "completed")

    async def metered(token: str, count: int) -> dict[str, Any] | None:
        page = (await brain.call(token, "GET", "/v1/usage")).json()
        return page if page["totals"]["records"] == count else None

    mine = await until(lambda: metered(user, 2), "two usage records")
    await until(lambda: metered(other_user, 1), "one usage record")
    assert mine["tenant"] == tenant and {r["tenant"] for r in mine["items"]} == {tenant}
    assert mine["totals"]["cost_cny"] == pytest.approx(sum(r["cost_cny"] for r in mine["items"]))
    first = (await brain.call(user, "GET", "/v1/usage", params={"limit": 1})).json()
    assert len(first["items"]) == 1 and first["next_cursor"]
    rest = (
        await brain.call(
            user, "GET", "/v1/usage", params={"limit": 1, "cursor": first["next_cursor"]}
        )
    ).json()
    assert {first["items"][0]["id"], rest["items"][0]["id"]} == {r["id"] for r in mine["items"]}

    report = (await brain.call(user, "GET", "/v1/usage/report")).json()
    assert [(r["tenant"], r["site"], r["simulated"], r["records"]) for r in report["rows"]] == [
        (tenant, "AA-sim", True, 2)
    ]
    assert report["tenants"][tenant]["cost_cny"] == pytest.approx(mine["totals"]["cost_cny"])
    assert set(report) == {"from", "to", "rows", "tenants"}

    csv = await brain.call(user, "GET", "/v1/usage/report", params={"format": "csv"})
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    assert "attachment" in csv.headers["content-disposition"]
    header, *lines = csv.text.strip().splitlines()
    assert header.split(",")[:4] == ["tenant", "site", "simulated", "records"]
    assert [line.split(",")[:4] for line in lines] == [[tenant, "AA-sim", "true", "2"]]

    staff = (
        await brain.as_admin("GET", "/v1/usage/report", params={"tenant": other, "format": "json"})
    ).json()
    assert [r["tenant"] for r in staff["rows"]] == [other]
    everyone = (await brain.as_admin("GET", "/v1/usage/report")).json()
    assert {tenant, other} <= set(everyone["tenants"])

    assert (await brain.call(user, "GET", "/v1/usage", params={"tenant": other})).status_code == 404
    assert (
        await brain.as_admin("GET", "/v1/usage", params={"tenant": "nobody"})
    ).status_code == 404
    empty = await brain.call(
        user, "GET", "/v1/usage", params={"from": "2030-01-02T00:00:00Z", "to": "2030-01-01"}
    )
    assert empty.status_code == 422 and empty.json()["errors"][0]["field"] == "from"
    bad = await brain.call(user, "GET", "/v1/usage", params={"from": "yesterday"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "from"
    wrong = await brain.call(user, "GET", "/v1/usage/report", params={"format": "xml"})
    assert wrong.status_code == 422 and wrong.json()["errors"][0]["field"] == "format"
    past = await brain.call(
        user, "GET", "/v1/usage", params={"from": "2020-01-01", "to": "2020-02-01"}
    )
    assert past.json()["totals"]["records"] == 0 and past.json()["items"] == []


async def test_the_openapi_document_describes_the_execution_routes(brain: Brain) -> None:
    document = (await brain.client.get("/openapi.json")).json()
    paths = document["paths"]
    for path, method, error in (
        ("/v1/requests/{request_id}/suspend", "post", "409"),
        ("/v1/requests/{request_id}/resume", "post", "503"),
        ("/v1/requests/{request_id}/attempts", "get", "404"),
        ("/v1/usage", "get", "422"),
        ("/v1/usage/report", "get", "404"),
    ):
        operation = paths[path][method]
        assert operation["summary"], path
        problem = operation["responses"][error]["content"]["application/problem+json"]["schema"]
        assert problem == {"$ref": "#/components/schemas/Problem"}, (path, error)
    report = paths["/v1/usage/report"]["get"]["responses"]["200"]["content"]
    assert {"application/json", "text/csv"} <= set(report)
    assert "job" in document["components"]["schemas"]["PlacementRequest"]["properties"]
