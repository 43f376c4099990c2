"""Requests with flows through the regional brain (real PostgreSQL and Redis, simulated sites at
an hour per second): admitted by the queue with each flow on the link calendars over its own
window; the job starts once its staging is done; the delivery of a completed job keeps its
window, a cancellation frees every flow; a request with flows that is not queued, names an
unknown end or asks for a quote is refused with the field named."""

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
import pytest_asyncio

from cnbrain.ledger.claim import FlowHold
from cnbrain.storage import ledger_store
from tests.execution.execution_brain import Brain, job_request, running_brain
from tests.polling import until

pytestmark = pytest.mark.asyncio(loop_scope="module")

HALF_RATE = 5_000
"""Mbps: half of the 10 Gbps the test's transfers may move at."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def brain(tmp_path_factory: Any) -> AsyncIterator[Brain]:
    async with running_brain(tmp_path_factory.mktemp("flows"), admission_interval_s=0.2) as running:
        yield running


def _moving(staging_gb: float, **changes: Any) -> dict[str, Any]:
    """A one-CPU job on BB-hub, from AA, whose dataset of `staging_gb` is on AA-dc (at most
    10 Gbps) and whose 45 GB of results go back to AA (at most 10 Gbps)."""
    return job_request(
        "BB-hub",
        **{"start": "queue", **changes},
        flows={
            "staging": [
                {"source": {"site": "AA-dc"}, "volume_gb": staging_gb, "max_rate_gbps": 10}
            ],
            "delivery": [{"destination": {"province": "AA"}, "volume_gb": 45, "max_rate_gbps": 10}],
        },
    )


async def _placed(brain: Brain, token: str, request_id: str) -> dict[str, Any]:
    async def left_queue() -> dict[str, Any] | None:
        view = await brain.view(token, request_id)
        return None if view["state"] == "queued" else view

    return await until(left_queue, f"request {request_id} admitted")


async def _flows(brain: Brain, request_id: str) -> list[FlowHold]:
    async with brain.brain.sessions() as session:
        return await ledger_store.held_flows(session, request_id=request_id)


def _at(events: list[dict[str, Any]], kind: str) -> datetime:
    return next(datetime.fromisoformat(e["at"]) for e in events if e["kind"] == kind)


async def test_the_job_starts_once_its_staging_is_done_and_its_delivery_outlives_it(
    brain: Brain,
) -> None:
    _, user = await brain.tenant_user()
    made = await brain.submit(user, _moving(5))
    assert made["state"] == "queued", made
    placed = await _placed(brain, user, made["id"])
    assert placed["site"] == "BB-hub", placed
    staging, delivery = await _flows(brain, made["id"])
    # The scarcity rule moves the data at half its full rate. For this one-CPU job, 10 Gbps
    # on links of 100 to 400 Gbps is priced 0.0094; 5 Gbps for twice as long 0.0043, plus
    # 0.0011 for 4 s of delay in an hour's run; a quarter rate 0.0021 plus 0.0033.
    # 5 GB at 5 Gbps: 8 s.
    assert (staging.kind, staging.peer, staging.mbps) == ("staging", "site AA-dc", HALF_RATE)
    assert staging.window.duration == 8
    assert staging.link_ids[0] in {"AA-dc--AA-agg1", "AA-dc--AA-agg2"}
    assert any("BB-hub" in link for link in staging.link_ids)
    assert (delivery.kind, delivery.peer, delivery.mbps) == ("delivery", "province AA", HALF_RATE)
    # After the run of an hour that starts when the staging ends; 45 GB at 5 Gbps: 72 s.
    assert delivery.window.start == staging.window.end + 3600
    assert delivery.window.duration == 72
    shown = (await brain.view(user, made["id"]))["flows"]
    assert [(f["kind"], f["peer"], f["mbps"], f["links"]) for f in shown] == [
        (flow.kind, flow.peer, flow.mbps, list(flow.link_ids)) for flow in (staging, delivery)
    ]
    assert datetime.fromisoformat(shown[0]["end"]).timestamp() == staging.window.end
    seen = await brain.states_until(user, made["id"], "completed", "failed")
    assert seen[-1] == "completed", seen
    answer = await brain.call(user, "GET", f"/v1/requests/{made['id']}/events")
    events = answer.json()["events"]
    waited = (_at(events, "job_submitted") - _at(events, "admitted")).total_seconds()
    assert waited >= 7, events
    assert await brain.held(made["id"]) == []
    assert [flow.kind for flow in await _flows(brain, made["id"])] == ["delivery"]


async def test_a_request_with_flows_waits_for_its_site_with_its_estimated_start(
    brain: Brain,
) -> None:
    _, user = await brain.tenant_user()
    a100 = {"cpu": 1, "memory_gib": 1, "accelerator": {"model": "A100", "count": 16}}
    holder = await brain.submit(
        user, job_request("BB-hub", resources=a100, job=None, duration_hours=1)
    )
    assert holder["state"] == "placed" and holder["site"] == "BB-hub", holder
    made = await brain.submit(user, _moving(5, resources=a100))

    async def planned() -> dict[str, Any] | None:
        view = await brain.view(user, made["id"])
        return view if view["queue"] is not None else None

    queue = (await until(planned, "the plan of the waiting request"))["queue"]
    assert queue["site"] == "BB-hub", queue
    # Its staging starts when the holder's hour ends (its compute is held from then), and
    # its job 4 s later.
    estimate = datetime.fromisoformat(queue["estimated_start"])
    since = (estimate - datetime.fromisoformat(holder["created_at"])).total_seconds()
    assert 3600 + 4 - 2 <= since <= 3600 + 4 + 2, queue
    assert [b["resource"] for b in queue["blockers"]] == ["milli-accelerators A100"], queue
    assert await _flows(brain, made["id"]) == []
    for request_id in (holder["id"], made["id"]):
        answer = await brain.call(user, "POST", f"/v1/requests/{request_id}/cancel")
        assert answer.status_code == 200, answer.text


async def test_cancelling_a_request_with_flows_frees_every_flow(brain: Brain) -> None:
    _, user = await brain.tenant_user()
    made = await brain.submit(user, _moving(4500))  # an hour of staging
    placed = await _placed(brain, user, made["id"])
    assert placed["state"] == "placed", placed
    assert [flow.kind for flow in await _flows(brain, made["id"])] == ["staging", "delivery"]
    assert (await brain.attempts(user, made["id"])) == []  # its data is still moving
    answer = await brain.call(user, "POST", f"/v1/requests/{made['id']}/cancel")
    assert answer.status_code == 200, answer.text
    assert await _flows(brain, made["id"]) == []
    assert await brain.held(made["id"]) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_moving(5, start="now"), "start"),
        (
            job_request(
                start="queue",
                flows={"staging": [{"source": {"site": "ZZ-dc"}, "volume_gb": 1}]},
            ),
            "flows.staging.0.source.site",
        ),
        (
            job_request(
                start="queue",
                flows={"delivery": [{"destination": {"province": "ZZ"}, "volume_gb": 1}]},
            ),
            "flows.delivery.0.destination.province",
        ),
        (
            job_request(start="queue", flows={"staging": [{"volume_gb": 1, "source": {}}]}),
            "flows.staging.0.source",
        ),
        (
            job_request(
                start="queue",
                flows={"staging": [{"source": {"province": "AA"}, "volume_gb": float("1e300")}]},
            ),
            "flows.staging.0.volume_gb",
        ),
    ],
)
async def test_a_request_with_bad_flows_is_refused_naming_the_field(
    brain: Brain, body: dict[str, Any], field: str
) -> None:
    _, user = await brain.tenant_user()
    answer = await brain.call(user, "POST", "/v1/requests", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == field, answer.text


async def test_a_quote_of_a_request_with_flows_is_refused(brain: Brain) -> None:
    _, user = await brain.tenant_user()
    answer = await brain.call(user, "POST", "/v1/quotes", json=_moving(5))
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == "flows", answer.text


async def test_a_tenant_reads_the_routes_its_data_would_take(brain: Brain) -> None:
    _, user = await brain.tenant_user()
    answer = await brain.call(
        user, "GET", "/v1/routes", params={"from_site": "AA-dc", "to_site": "CC-hub"}
    )
    assert answer.status_code == 200, answer.text
    routes = answer.json()["routes"]
    assert routes, answer.text
    best = routes[0]
    assert [(s["kind"], s["owner"]) for s in best["segments"]] == [
        ("source", "east"),
        ("backbone", "national"),
        ("destination", "west"),
    ]
    assert best["segments"][0]["nodes"][0] == "AA-dc"
    assert best["segments"][1]["links"] == ["AA-gw--BB-gw", "BB-gw--CC-gw"]  # 5 ms, not 10
    assert best["free_gbps"] == 100  # the sites' own links
    assert [r["latency_ms"] for r in routes] == sorted(r["latency_ms"] for r in routes)
    answer = await brain.call(
        user, "GET", "/v1/routes", params={"from_site": "AA-dc", "to_site": "AA-idle", "routes": 1}
    )
    [local] = answer.json()["routes"]
    assert [(s["kind"], s["owner"]) for s in local["segments"]] == [("local", "east")]
    answer = await brain.call(
        user,
        "GET",
        "/v1/routes",
        params={"from_site": "AA-dc", "to_site": "CC-hub", "min_free_gbps": 101},
    )
    assert answer.json()["routes"] == []
    answer = await brain.call(
        user, "GET", "/v1/routes", params={"from_site": "AA-dc", "to_site": "ZZ"}
    )
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "to_site"
