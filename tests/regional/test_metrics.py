"""`GET /metrics` of a brain, on its metrics listener (not on the REST port): its REST calls
by route template and status, their durations, its decisions by outcome and reason with
their latency, the capacity and reservations its ledger holds, moving with a burst of
submissions; the admission queue by priority class with the classes' wait objectives, the
admission rounds and a preemption, on the tiny map; the ledger auditor's findings; and what
a scrape reads from the database, shared by the scrapes within `metrics_max_age_s` and
bounded by `metrics_read_timeout_s`. The brains here read at every scrape
(`metrics_max_age_s=0`) unless a test says otherwise."""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select, text, update

from cnbrain import __version__
from cnbrain.ledger.audit import Kind
from cnbrain.storage.models import LinkCapacity
from tests.databases import create_postgres_database, drop_postgres_database, require_redis
from tests.regional.bodies import LOCAL_CPU
from tests.regional.brain_api import Api, brain_settings, serving
from tests.tiny_map import ascend_body, tiny_map_raw

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOO_BIG: dict[str, Any] = {**LOCAL_CPU, "resources": {"cpu": 100_000, "memory_gib": 8}}
WITH_BANDWIDTH: dict[str, Any] = {**LOCAL_CPU, "constraints": {"min_bandwidth_gbps": 1}}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


EVERY_SCRAPE = {"metrics_port": 0, "metrics_max_age_s": 0}
"""A metrics listener on a free port of loopback, whose scrapes all read the database."""


@contextlib.asynccontextmanager
async def _brain(name: str, tmp: Any, **extra: Any) -> AsyncIterator[Api]:
    """A brain on a database of its own and the test Redis, with `extra` settings."""
    database = await create_postgres_database(name)
    redis = await require_redis()
    try:
        async with serving(brain_settings(database, redis, tmp, **extra)) as (app, client):
            yield Api(
                client=client,
                brain=app.state.brain,
                cases=app.state.brain.requests,
                metrics_port=app.state.metrics_port,
            )
    finally:
        await drop_postgres_database(database)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def api(tmp_path_factory: Any) -> AsyncIterator[Api]:
    """A brain on the built-in map with a metrics listener."""
    async with _brain("cnbrain_metrics", tmp_path_factory.mktemp("metrics"), **EVERY_SCRAPE) as one:
        yield one


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tiny(tmp_path_factory: Any) -> AsyncIterator[Api]:
    """A brain on the tiny map, whose admission loop runs every 0.2 s."""
    tmp = tmp_path_factory.mktemp("metrics-queue")
    (tmp / "map.json").write_text(json.dumps(tiny_map_raw()), encoding="utf-8")
    extra = {"map": str(tmp / "map.json"), "admission_interval_s": 0.2, **EVERY_SCRAPE}
    async with _brain("cnbrain_metrics_queue", tmp, **extra) as one:
        yield one


async def _scrape(api: Api) -> httpx.Response:
    assert api.metrics_port is not None
    async with httpx.AsyncClient() as client:
        return await client.get(f"http://127.0.0.1:{api.metrics_port}/metrics", timeout=30)


async def _samples(api: Api) -> Samples:
    answer = await _scrape(api)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def _key(name: str, labels: dict[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, tuple(sorted(labels.items())))


def _moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = _key(name, labels)
    return after.get(key, 0.0) - before.get(key, 0.0)


async def _submit(api: Api, token: str, body: dict[str, Any]) -> dict[str, Any]:
    made = await api.call(token, "POST", "/v1/requests", json=body)
    assert made.status_code == 201, made.text
    view: dict[str, Any] = made.json()
    return view


async def _until(api: Api, token: str, request_id: str, state: str) -> dict[str, Any]:
    """The request's view once it is in `state` (polled; fails after 15 s)."""
    for _ in range(150):
        view: dict[str, Any] = (await api.call(token, "GET", f"/v1/requests/{request_id}")).json()
        if view["state"] == state:
            return view
        await asyncio.sleep(0.1)
    raise AssertionError(f"request {request_id} stayed {view['state']}")


async def _listed(api: Api, token: str, request_id: str) -> dict[str, Any]:
    """The request's entry in the queue's listing once an admission round planned it
    (polled; fails after 15 s)."""
    for _ in range(150):
        items: list[dict[str, Any]] = (await api.call(token, "GET", "/v1/queue")).json()["items"]
        found = [item for item in items if item["id"] == request_id]
        if found:
            return found[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"request {request_id} is not in the queue's listing")


async def test_a_burst_moves_the_calls_their_durations_and_the_decisions(api: Api) -> None:
    _, _, user = await api.tenant()
    before = await _samples(api)
    for body in (LOCAL_CPU, LOCAL_CPU, WITH_BANDWIDTH, TOO_BIG):
        await _submit(api, user, body)
    viewed = (await api.call(user, "GET", "/v1/requests")).json()["items"][0]["id"]
    assert (await api.call(user, "GET", f"/v1/requests/{viewed}")).status_code == 200
    assert (await api.client.get("/nowhere")).status_code == 404
    after = await _samples(api)

    def moved(name: str, **labels: str) -> float:
        return _moved(before, after, name, **labels)

    submitted = {"method": "POST", "route": "/v1/requests"}
    assert moved("cnbrain_http_requests_total", **submitted, status="201") == 4
    assert moved("cnbrain_http_request_duration_seconds_count", **submitted) == 4
    assert moved("cnbrain_http_request_duration_seconds_sum", **submitted) > 0
    one = {"method": "GET", "route": "/v1/requests/{request_id}", "status": "200"}
    assert moved("cnbrain_http_requests_total", **one) == 1
    assert moved("cnbrain_http_requests_total", method="GET", route="unmatched", status="404") == 1
    assert moved("cnbrain_decisions_total", outcome="placed", reason="local") == 3
    assert moved("cnbrain_decisions_total", outcome="rejected", reason="capacity") == 1
    decisions = {
        labels: value - before.get((name, labels), 0.0)
        for (name, labels), value in after.items()
        if name == "cnbrain_decisions_total" and value != before.get((name, labels), 0.0)
    }
    assert sum(decisions.values()) == 4, decisions  # no other outcome or reason moved
    assert moved("cnbrain_decision_duration_seconds_count", outcome="placed") == 3
    assert moved("cnbrain_decision_duration_seconds_count", outcome="rejected") == 1
    assert moved("cnbrain_decision_duration_seconds_sum", outcome="placed") > 0
    assert moved("cnbrain_reservations", kind="local", state="held") == 3
    assert not any(viewed in str(key) for key in after)  # no series names a request
    info = {"brain": "standalone", "region": "", "version": __version__}
    assert after[_key("cnbrain_brain_info", info)] == 1

    def used_cores(samples: Samples) -> float:
        total = 0.0
        for (name, labels), value in samples.items():
            if dict(labels).get("resource") == "cpu_cores":
                total += value if name == "cnbrain_site_capacity" else -value
        return total

    assert after[("cnbrain_ledger_read", ())] == 1
    assert used_cores(after) - used_cores(before) == pytest.approx(3 * 8)  # the three placed
    assert any(
        name == "cnbrain_link_utilisation" and value > 0 for (name, _), value in after.items()
    )


async def test_the_auditors_findings_show_once_it_audits(api: Api) -> None:
    before = await _samples(api)
    for kind in Kind:  # every kind has its series from the start
        assert _key("cnbrain_ledger_audit_findings_total", {"kind": kind}) in before
    async with api.brain.sessions.begin() as session:
        link = await session.scalar(select(LinkCapacity.link_id).limit(1))
    one_link = update(LinkCapacity).where(LinkCapacity.link_id == link)
    async with api.brain.sessions.begin() as session:  # one more Mbps used than reserved
        await session.execute(one_link.values(mbps_used=LinkCapacity.mbps_used + 1))
    try:
        await api.brain.auditor.audit()
    finally:
        async with api.brain.sessions.begin() as session:
            await session.execute(one_link.values(mbps_used=LinkCapacity.mbps_used - 1))
    after = await _samples(api)
    mismatch = {"kind": "used_mismatch"}
    assert _moved(before, after, "cnbrain_ledger_audits_total") == 1
    assert _moved(before, after, "cnbrain_ledger_audit_findings_total", **mismatch) >= 1
    assert after[_key("cnbrain_ledger_audit_last_findings", mismatch)] >= 1
    assert after[_key("cnbrain_ledger_audit_last_timestamp_seconds", {})] > 0
    await api.brain.auditor.audit()  # the ledger is whole again
    whole = await _samples(api)
    assert whole[_key("cnbrain_ledger_audit_last_findings", mismatch)] == 0
    await api.invariants()


async def test_the_queue_by_class_the_admission_rounds_and_a_preemption(tiny: Api) -> None:
    _, user = await tiny.tenant_user("metrics-queue")
    start = await _samples(tiny)
    for name, objective in (("low", 86_400), ("normal", 86_400), ("high", 3_600)):
        assert start[_key("cnbrain_queue_wait_objective_seconds", {"class": name})] == objective
        assert start[_key("cnbrain_queue_length", {"class": name})] == 0
        assert start[_key("cnbrain_queue_oldest_wait_seconds", {"class": name})] == 0

    holder = await _submit(tiny, user, ascend_body(16, priority_class="low"))
    assert holder["state"] == "placed"
    waiting = await _submit(tiny, user, ascend_body(16, start="queue"))
    assert waiting["state"] == "queued"
    entry = await _listed(tiny, user, waiting["id"])
    before_scrape = datetime.now(UTC)
    queued = await _samples(tiny)
    after_scrape = datetime.now(UTC)
    assert queued[_key("cnbrain_queue_length", {"class": "normal"})] == 1
    assert queued[_key("cnbrain_queue_length", {"class": "low"})] == 0
    queued_at = datetime.fromisoformat(entry["queued_at"])
    assert queued_at >= datetime.fromisoformat(waiting["created_at"])
    waited = queued[_key("cnbrain_queue_oldest_wait_seconds", {"class": "normal"})]
    # The wait the metrics count is the one the queue lists: from when it was queued.
    assert (before_scrape - queued_at).total_seconds() <= waited
    assert waited <= (after_scrape - queued_at).total_seconds()
    assert waited > 0
    assert _moved(start, queued, "cnbrain_decisions_total", outcome="queued", reason="waiting") == 1
    placed = {"outcome": "placed", "reason": "across_provinces"}  # AA to CC-hub
    assert _moved(start, queued, "cnbrain_decisions_total", **placed) == 1
    assert _moved(start, queued, "cnbrain_reservations", kind="local", state="held") == 1

    # A high request that cannot wait preempts the low holder, which waits again.
    urgent = await _submit(
        tiny, user, ascend_body(16, start="queue", priority_class="high", max_wait_s=5)
    )
    await _until(tiny, user, urgent["id"], "placed")
    await _until(tiny, user, holder["id"], "queued")
    after = await _samples(tiny)
    assert _moved(start, after, "cnbrain_preemptions_total") == 1
    assert _moved(start, after, "cnbrain_admission_requests_total", outcome="admitted") == 1
    assert _moved(start, after, "cnbrain_admission_round_duration_seconds_count") >= 1
    assert _moved(start, after, "cnbrain_admission_round_duration_seconds_sum") > 0
    for name, length in (("low", 1), ("normal", 1), ("high", 0)):
        assert after[_key("cnbrain_queue_length", {"class": name})] == length
    waited = after[_key("cnbrain_queue_oldest_wait_seconds", {"class": "normal"})]
    assert waited > queued[_key("cnbrain_queue_oldest_wait_seconds", {"class": "normal"})]
    assert after[_key("cnbrain_queue_oldest_wait_seconds", {"class": "high"})] == 0

    for request in (urgent, waiting, holder):
        cancelled = await tiny.call(user, "POST", f"/v1/requests/{request['id']}/cancel")
        assert cancelled.status_code == 200, cancelled.text
    emptied = await _samples(tiny)
    assert all(emptied[_key("cnbrain_queue_length", {"class": n})] == 0 for n in ("low", "normal"))
    await tiny.invariants()


async def test_the_metrics_are_on_their_own_listener_not_on_the_rest_port(api: Api) -> None:
    assert (await api.client.get("/metrics")).status_code == 404
    assert api.brain.settings.metrics_host == "127.0.0.1"  # loopback unless told otherwise
    assert (await _scrape(api)).status_code == 200
    # What the page tells of the sites, the REST API tells staff only.
    assert (await api.client.get("/v1/capacity/sites")).status_code == 401


async def test_a_database_that_does_not_answer_in_time_is_taken_for_down(api: Api) -> None:
    assert (await _samples(api))[("cnbrain_ledger_read", ())] == 1
    async with api.brain.sessions() as session, session.begin():
        # Every read of the queue now waits for this transaction, which outlasts the
        # scrape's read timeout: the scrape answers all the same, saying so.
        await session.execute(text("LOCK TABLE placement_requests IN ACCESS EXCLUSIVE MODE"))
        stalled = await _samples(api)
    assert stalled[("cnbrain_ledger_read", ())] == 0
    assert (await _samples(api))[("cnbrain_ledger_read", ())] == 1


async def test_scrapes_within_the_max_age_share_the_reads_of_the_first(
    tmp_path_factory: Any,
) -> None:
    tmp = tmp_path_factory.mktemp("metrics-cached")
    async with _brain("cnbrain_metrics_cached", tmp, metrics_port=0) as one:
        assert one.brain.settings.metrics_max_age_s > 0  # the default shares
        _, _, user = await one.tenant()
        first = await _samples(one)
        await _submit(one, user, LOCAL_CPU)
        second, third = await asyncio.gather(_samples(one), _samples(one))
        held = _key("cnbrain_reservations", {"kind": "local", "state": "held"})
        assert second[held] == third[held] == first[held]  # read before the submission
        placed = _key("cnbrain_decisions_total", {"outcome": "placed", "reason": "local"})
        assert second[placed] == first.get(placed, 0) + 1  # counted, not read: moves at once
