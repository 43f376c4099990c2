"""The admission queue of a regional brain on PostgreSQL and Redis, on the tiny map: requests
that ask to wait are queued with their place and estimated start, admitted when capacity
frees, in class order, and rejected when their max wait passes; room made by preemption for
a request of another region is left to it while its hold lasts, by the admission round and
by the decisions of requests that start now.

Only CC-hub has Ascend910B accelerators (16), so every request here that asks for them
competes for that one pool.
"""

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

import pytest
import pytest_asyncio
from sqlalchemy import select

from cnbrain.domain.request import PlacementRequest
from cnbrain.federation.codec import request_json
from cnbrain.ledger.keys import accelerator_key
from cnbrain.regional.federation import RegionalServicer
from cnbrain.regional.use_cases.timelines import ReadTimelines
from cnbrain.storage import room_holds
from cnbrain.storage.models import LinkCapacity
from cnbrain.v1 import regional_pb2
from tests.databases import create_postgres_database, drop_postgres_database, require_redis
from tests.regional.brain_api import Api, brain_settings, serving
from tests.tiny_map import ascend_body, tiny_map_raw

pytestmark = pytest.mark.asyncio(loop_scope="module")

MAX_QUEUED = 10
"""Requests one tenant may have waiting, in this module's brain."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def api(tmp_path_factory: Any) -> AsyncIterator[Api]:
    database = await create_postgres_database("cnbrain_queue")
    redis = await require_redis()
    tmp = tmp_path_factory.mktemp("queue")
    (tmp / "map.json").write_text(json.dumps(tiny_map_raw()), encoding="utf-8")
    settings = brain_settings(
        database,
        redis,
        tmp,
        map=str(tmp / "map.json"),
        admission_interval_s=0.2,
        max_queued_per_tenant=MAX_QUEUED,
    )
    try:
        async with serving(settings) as (app, client):
            yield Api(client=client, brain=app.state.brain, cases=app.state.brain.requests)
    finally:
        await drop_postgres_database(database)


async def _submit(api: Api, token: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = await api.call(token, "POST", "/v1/requests", json=body)
    assert answer.status_code == 201, answer.text
    view: dict[str, Any] = answer.json()
    return view


async def _until(
    api: Api, token: str, request_id: str, done: Any, *, timeout_s: float = 15
) -> dict[str, Any]:
    """The request's view once `done(view)` holds; fails after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        view: dict[str, Any] = (await api.call(token, "GET", f"/v1/requests/{request_id}")).json()
        if done(view):
            return view
        assert loop.time() < deadline, f"request {request_id} stayed {view['state']}: {view}"
        await asyncio.sleep(0.1)


async def _events(api: Api, token: str, request_id: str) -> list[str]:
    answer = await api.call(token, "GET", f"/v1/requests/{request_id}/events")
    assert answer.status_code == 200, answer.text
    return [event["kind"] for event in answer.json()["events"]]


async def _cancel(api: Api, token: str, request_id: str) -> None:
    answer = await api.call(token, "POST", f"/v1/requests/{request_id}/cancel")
    assert answer.status_code == 200, answer.text


async def test_a_queued_request_waits_with_its_estimate_and_is_admitted_when_capacity_frees(
    api: Api,
) -> None:
    _, user = await api.tenant_user("q-wait")
    holder = await _submit(api, user, ascend_body(16))
    assert holder["state"] == "placed" and holder["site"] == "CC-hub"
    waiting = await _submit(api, user, ascend_body(16, start="queue"))
    assert waiting["state"] == "queued", waiting
    assert waiting["reason"] == "waits in the admission queue"
    planned = await _until(api, user, waiting["id"], lambda v: v["queue"] is not None)
    queue = planned["queue"]
    assert queue["position"] == 0 and queue["site"] == "CC-hub"
    estimate = datetime.fromisoformat(queue["estimated_start"])
    created = datetime.fromisoformat(holder["created_at"])
    # It is planned for when the holder's hour ends (to the second), not before.
    assert 3590 <= (estimate - created).total_seconds() <= 3610, queue
    [blocker] = queue["blockers"]
    assert {k: blocker[k] for k in ("site", "resource", "wants", "free", "held_by")} == {
        "site": "CC-hub",
        "resource": "milli-accelerators Ascend910B",
        "wants": 16_000,
        "free": 0,
        "held_by": 1,
    }
    assert blocker["text"].startswith(
        "CC-hub: wants 16000 milli-accelerators Ascend910B, 0 free; 16000 held until "
    ), blocker
    assert blocker["text"].endswith(" by 1 job")
    await _cancel(api, user, holder["id"])
    admitted = await _until(api, user, waiting["id"], lambda v: v["state"] == "placed")
    assert admitted["site"] == "CC-hub" and admitted["queue"] is None
    assert admitted["reason"] == "admitted from the admission queue"
    assert await _events(api, user, waiting["id"]) == ["submitted", "queued", "planned", "admitted"]
    await _cancel(api, user, waiting["id"])
    await api.invariants()


async def test_a_request_is_rejected_once_its_max_wait_passes(api: Api) -> None:
    _, user = await api.tenant_user("q-expire")
    holder = await _submit(api, user, ascend_body(16))
    waiting = await _submit(api, user, ascend_body(8, start="queue", max_wait_s=1))
    assert waiting["state"] == "queued"
    rejected = await _until(api, user, waiting["id"], lambda v: v["state"] == "rejected")
    assert rejected["reason"] == "no start within its max wait of 1 s"
    assert (await _events(api, user, waiting["id"]))[-1] == "rejected"
    await _cancel(api, user, holder["id"])
    await api.invariants()


async def test_a_higher_class_is_admitted_first_and_a_queued_request_can_be_cancelled(
    api: Api,
) -> None:
    _, user = await api.tenant_user("q-class")
    holder = await _submit(api, user, ascend_body(16))
    low = await _submit(api, user, ascend_body(16, start="queue", priority_class="low"))
    high = await _submit(api, user, ascend_body(16, start="queue", priority_class="high"))
    planned = await _until(
        api, user, low["id"], lambda v: v["queue"] is not None and v["queue"]["position"] == 1
    )
    high_view = await _until(api, user, high["id"], lambda v: v["queue"] is not None)
    assert high_view["queue"]["position"] == 0
    queue = (await api.call(user, "GET", "/v1/queue")).json()
    assert [(i["id"], i["position"]) for i in queue["items"]] == [(high["id"], 0), (low["id"], 1)]
    assert queue["next_after"] is None
    first = (await api.call(user, "GET", "/v1/queue", params={"limit": 1})).json()
    assert [i["id"] for i in first["items"]] == [high["id"]] and first["next_after"] == 0
    rest = (await api.call(user, "GET", "/v1/queue", params={"after": 0})).json()
    assert [i["id"] for i in rest["items"]] == [low["id"]]
    _, stranger = await api.tenant_user("q-stranger")
    assert (await api.call(stranger, "GET", "/v1/queue")).json()["items"] == []
    everyone = (await api.as_admin("GET", "/v1/queue")).json()["items"]
    assert {high["id"], low["id"]} <= {i["id"] for i in everyone}
    assert planned["queue"]["estimated_start"] > high_view["queue"]["estimated_start"]
    await _cancel(api, user, holder["id"])
    await _until(api, user, high["id"], lambda v: v["state"] == "placed")
    still = await _until(
        api, user, low["id"], lambda v: v["queue"] is not None and v["queue"]["position"] == 0
    )
    assert still["state"] == "queued"
    await _cancel(api, user, low["id"])
    cancelled = (await api.call(user, "GET", f"/v1/requests/{low['id']}")).json()
    assert cancelled["state"] == "cancelled" and cancelled["queue"] is None
    await _cancel(api, user, high["id"])
    await api.invariants()


async def test_a_higher_class_that_cannot_wait_preempts_lower_work_which_waits_again(
    api: Api,
) -> None:
    _, user = await api.tenant_user("q-preempt")
    low = await _submit(api, user, ascend_body(16, priority_class="low"))
    assert low["state"] == "placed"
    urgent = await _submit(
        api, user, ascend_body(16, start="queue", priority_class="high", max_wait_s=5)
    )
    admitted = await _until(api, user, urgent["id"], lambda v: v["state"] == "placed")
    assert admitted["site"] == "CC-hub"
    victim = await _until(api, user, low["id"], lambda v: v["queue"] is not None)
    assert victim["state"] == "queued"
    assert victim["reason"] == "preempted by a request of class high"
    assert await _events(api, user, low["id"]) == [
        "submitted",
        "placed",
        "preempted",
        "queued",
        "planned",
    ]
    await api.invariants()
    await _cancel(api, user, urgent["id"])
    again = await _until(api, user, low["id"], lambda v: v["state"] == "placed")
    assert again["site"] == "CC-hub"
    assert (await _events(api, user, low["id"]))[-1] == "admitted"
    await _cancel(api, user, low["id"])
    await api.invariants()


ACCESS_LINK = "AA-acc--AA-agg1"
"""The access link of AA's sites' shortest paths (100 Gbps): AA-acc - AA-agg1 - site."""


async def _link_used_mbps(api: Api, link_id: str) -> int:
    async with api.brain.sessions() as session:
        used = await session.scalar(
            select(LinkCapacity.mbps_used).where(LinkCapacity.link_id == link_id)
        )
    assert used is not None, link_id
    return int(used)


async def test_a_higher_class_blocked_by_a_full_link_preempts_the_lower_work_holding_it(
    api: Api,
) -> None:
    _, user = await api.tenant_user("q-link")

    def body(cpu: int, gbps: float, **extra: Any) -> dict[str, Any]:
        constraints = {"min_bandwidth_gbps": gbps, **extra.pop("constraints", {})}
        return {
            "source_province": "AA",
            "resources": {"cpu": cpu, "memory_gib": 1},
            "duration_hours": 1,
            "constraints": constraints,
            **extra,
        }

    gold = {"labels": {"tier": "gold"}}  # only AA-dc carries it
    # Low work on AA-dc takes the whole access link on its path.
    low = await _submit(api, user, body(1, 100, constraints=gold, priority_class="low"))
    assert (low["state"], low["site"]) == ("placed", "AA-dc"), low
    assert await _link_used_mbps(api, ACCESS_LINK) == 100_000
    # The rest of AA-dc's 64 cores, in a class never preempted.
    rest = await _submit(api, user, body(63, 0, constraints=gold, priority_class="high"))
    assert (rest["state"], rest["site"]) == ("placed", "AA-dc"), rest
    # Within 0.9 ms of AA only AA-dc and AA-idle are, both through the full access link: on
    # AA-dc it lacks cores no lower class frees, on AA-idle only the link's bandwidth.
    urgent = await _submit(
        api,
        user,
        body(
            4,
            10,
            constraints={"max_latency_ms": 0.9},
            priority_class="high",
            start="queue",
            max_wait_s=5,
        ),
    )
    assert urgent["state"] == "queued", urgent
    admitted = await _until(api, user, urgent["id"], lambda v: v["state"] == "placed")
    assert admitted["site"] == "AA-idle"
    victim = await _until(api, user, low["id"], lambda v: v["queue"] is not None)
    assert victim["state"] == "queued"
    assert victim["reason"] == "preempted by a request of class high"
    assert await _events(api, user, low["id"]) == [
        "submitted",
        "placed",
        "preempted",
        "queued",
        "planned",
    ]
    # Its bandwidth was given back: the link holds only the urgent request's 10 Gbps.
    assert await _link_used_mbps(api, ACCESS_LINK) == 10_000
    assert (await api.call(user, "GET", f"/v1/requests/{rest['id']}")).json()["state"] == "placed"
    await api.invariants()
    for one in (urgent, rest, low):
        await _cancel(api, user, one["id"])
    await api.invariants()


async def test_a_queued_request_is_planned_around_a_link_reported_down(api: Api) -> None:
    _, user = await api.tenant_user("q-down")
    down = await api.as_admin(
        "PUT", f"/v1/links/{ACCESS_LINK}/state", json={"state": "down", "reason": "fibre cut"}
    )
    assert down.status_code == 200, down.text
    try:
        # Its best route to AA-dc crosses the link down; the other goes AA-acc - AA-gw.
        waiting = await _submit(
            api,
            user,
            {
                "source_province": "AA",
                "resources": {"cpu": 4, "memory_gib": 1},
                "duration_hours": 1,
                "constraints": {"min_bandwidth_gbps": 10, "labels": {"tier": "gold"}},
                "start": "queue",
                "max_wait_s": 5,
            },
        )
        assert waiting["state"] == "queued", waiting
        admitted = await _until(api, user, waiting["id"], lambda v: v["state"] == "placed")
        assert admitted["site"] == "AA-dc"
        links = [h["link"] for s in admitted["decision"]["path"]["segments"] for h in s["hops"]]
        assert ACCESS_LINK not in links and "AA-acc--AA-gw" in links, links
        await _cancel(api, user, waiting["id"])
    finally:
        up = await api.as_admin("PUT", f"/v1/links/{ACCESS_LINK}/state", json={"state": "up"})
        assert up.status_code == 200, up.text
    await api.invariants()


async def test_rounds_run_at_once_never_admit_a_request_twice(api: Api) -> None:
    _, user = await api.tenant_user("q-twice")
    holder = await _submit(api, user, ascend_body(16))
    waiting = [await _submit(api, user, ascend_body(2, start="queue")) for _ in range(10)]
    await _cancel(api, user, holder["id"])
    await asyncio.gather(*(api.use_cases.admit() for _ in range(4)))
    for one in waiting[:8]:
        await _until(api, user, one["id"], lambda v: v["state"] == "placed")
    for one in waiting:
        kinds = await _events(api, user, one["id"])
        assert kinds.count("admitted") == (1 if kinds[-1] == "admitted" else 0), kinds
    states = [
        (await api.call(user, "GET", f"/v1/requests/{one['id']}")).json()["state"]
        for one in waiting
    ]
    assert states.count("placed") == 8 and states.count("queued") == 2
    await api.invariants()
    for one in waiting:
        await _cancel(api, user, one["id"])


async def test_a_request_over_its_tenants_quota_waits_and_holds_up_no_other(api: Api) -> None:
    tenant, user = await api.tenant_user("q-quota")
    _, other = await api.tenant_user("q-other")
    limited = await api.as_admin("PUT", f"/v1/tenants/{tenant}/quota", json={"accelerators": 4})
    assert limited.status_code == 200, limited.text
    holder = await _submit(api, other, ascend_body(16))
    first = await _submit(api, user, ascend_body(4, start="queue"))
    second = await _submit(api, user, ascend_body(4, start="queue"))
    theirs = await _submit(api, other, ascend_body(4, start="queue"))
    await _cancel(api, other, holder["id"])
    await _until(api, user, first["id"], lambda v: v["state"] == "placed")
    await _until(api, other, theirs["id"], lambda v: v["state"] == "placed")
    await asyncio.sleep(0.5)  # more rounds: the quota keeps the second waiting
    assert (await api.call(user, "GET", f"/v1/requests/{second['id']}")).json()["state"] == "queued"
    await _cancel(api, user, first["id"])
    await _until(api, user, second["id"], lambda v: v["state"] == "placed")
    for token, one in ((user, second), (other, theirs)):
        await _cancel(api, token, one["id"])
    await api.invariants()


async def _share(api: Api, tenant: str, **body: Any) -> None:
    put = await api.as_admin("PUT", f"/v1/tenants/{tenant}/fair-share", json=body)
    assert put.status_code in (200, 201), put.text


async def _placed_among(api: Api, token: str, views: list[dict[str, Any]]) -> list[str]:
    states = [
        (await api.call(token, "GET", f"/v1/requests/{one['id']}")).json()["state"] for one in views
    ]
    return [one["id"] for one, state in zip(views, states, strict=True) if state == "placed"]


async def test_freed_capacity_goes_to_tenants_by_their_fair_share_weights(api: Api) -> None:
    _, holder_user = await api.tenant_user("q-w-holder")
    _, light_user = await api.tenant_user("q-w-light")
    heavy, heavy_user = await api.tenant_user("q-w-heavy")
    await _share(api, heavy, weight=3)
    holder = await _submit(api, holder_user, ascend_body(16))
    # The light tenant's requests are older; four of the eight fit once the pool frees.
    lights = [await _submit(api, light_user, ascend_body(4, start="queue")) for _ in range(4)]
    heavies = [await _submit(api, heavy_user, ascend_body(4, start="queue")) for _ in range(4)]
    await _cancel(api, holder_user, holder["id"])
    await _until(api, heavy_user, heavies[2]["id"], lambda v: v["state"] == "placed")
    # Weighted shares: the older light request first, then the heavy tenant three times.
    assert await _placed_among(api, light_user, lights) == [lights[0]["id"]]
    assert await _placed_among(api, heavy_user, heavies) == [h["id"] for h in heavies[:3]]
    for token, views in ((light_user, lights), (heavy_user, heavies)):
        for one in views:
            await _cancel(api, token, one["id"])
    await api.invariants()


async def test_a_cohort_lends_idle_quota_and_its_lender_reclaims_it(api: Api) -> None:
    lender, lender_user = await api.tenant_user("q-lender")
    borrower, borrower_user = await api.tenant_user("q-borrower")
    cohort = "q-pool"
    await _share(
        api,
        lender,
        cohort=cohort,
        nominal={"cpu_cores": 8, "memory_gib": 8, "accelerators": {"Ascend910B": 12}},
    )
    await _share(
        api,
        borrower,
        cohort=cohort,
        nominal={"cpu_cores": 8, "memory_gib": 8, "accelerators": {"Ascend910B": 4}},
        borrowing_limit={"accelerators": {"Ascend910B": 12}},
    )
    # The borrower holds the whole pool, 12 of it borrowed, in a class never preempted.
    taken = [
        await _submit(api, borrower_user, ascend_body(4, start="queue", priority_class="high"))
        for _ in range(4)
    ]
    for one in taken:
        await _until(api, borrower_user, one["id"], lambda v: v["state"] == "placed")
    over = await _submit(api, borrower_user, ascend_body(4, start="queue", priority_class="high"))
    # The lender, within its nominal, cannot wait: the newest borrowed work gives way.
    back = await _submit(
        api, lender_user, ascend_body(8, start="queue", priority_class="low", max_wait_s=5)
    )
    await _until(api, lender_user, back["id"], lambda v: v["state"] == "placed", timeout_s=30)
    states = {
        one["id"]: (await api.call(borrower_user, "GET", f"/v1/requests/{one['id']}")).json()
        for one in [*taken, over]
    }
    requeued = [
        i for i, v in states.items() if v["reason"] == "preempted by a request of class low"
    ]
    # Two of the borrower's four (4 accelerators each) give back the lender's 8.
    assert len(requeued) == 2 and set(requeued) <= {one["id"] for one in taken}
    assert all(states[i]["state"] == "queued" for i in requeued)
    assert states[over["id"]]["state"] == "queued"
    for token, one in (
        *((borrower_user, one) for one in [*taken, over]),
        (lender_user, back),
    ):
        await api.call(token, "POST", f"/v1/requests/{one['id']}/cancel")
    await api.invariants()


async def test_a_tenant_may_have_only_so_many_requests_waiting(api: Api) -> None:
    _, user = await api.tenant_user("q-bound")
    holder = await _submit(api, user, ascend_body(16))
    waiting = [await _submit(api, user, ascend_body(1, start="queue")) for _ in range(MAX_QUEUED)]
    refused = await api.call(user, "POST", "/v1/requests", json=ascend_body(1, start="queue"))
    assert refused.status_code == 409, refused.text
    assert f"has {MAX_QUEUED} requests waiting in the queue" in refused.json()["detail"]
    now = await api.call(user, "POST", "/v1/requests", json=ascend_body(1))
    assert now.status_code == 201 and now.json()["state"] == "rejected"
    await _cancel(api, user, waiting[0]["id"])
    again = await api.call(user, "POST", "/v1/requests", json=ascend_body(1, start="queue"))
    assert again.status_code == 201, again.text
    for one in [*waiting[1:], again.json(), holder]:
        await _cancel(api, user, one["id"])
    await api.invariants()


async def test_room_made_for_a_request_of_another_region_is_left_to_it_until_its_hold_ends(
    api: Api,
) -> None:
    _, user = await api.tenant_user("q-room")
    holder = await _submit(api, user, ascend_body(16, priority_class="low"))
    assert holder["state"] == "placed" and holder["site"] == "CC-hub"
    waiting = await _submit(api, user, ascend_body(16, start="queue"))
    assert waiting["state"] == "queued"
    foreign = PlacementRequest.model_validate(
        {**ascend_body(16, priority_class="high"), "id": "other-region-1", "tenant": "q-room"}
    )
    make_room = api.use_cases.make_room
    assert (await make_room(foreign, ["nowhere", "AA-dc"])).requeued == 0
    room = await make_room(foreign, ["AA-dc", "CC-hub"])
    assert (room.requeued, room.site_id) == (1, "CC-hub"), room
    requeued = await _until(api, user, holder["id"], lambda v: v["state"] == "queued")
    assert requeued["reason"] == "preempted by a request of class high"

    # Rounds run every 0.2 s: neither the waiting request nor the victim takes the room.
    await asyncio.sleep(2)
    for one in (waiting, holder):
        view = (await api.call(user, "GET", f"/v1/requests/{one['id']}")).json()
        assert view["state"] == "queued", view

    now = datetime.now(UTC)
    async with api.brain.sessions.begin() as session:  # the hold ends now
        [hold] = await room_holds.active(session, now=now)
        await room_holds.hold(session, replace(hold, until=now), now=now)
    admitted = await _until(api, user, waiting["id"], lambda v: v["state"] == "placed")
    assert admitted["site"] == "CC-hub"
    for one in (waiting, holder):
        await _cancel(api, user, one["id"])
    await api.invariants()


async def test_a_request_that_starts_now_cannot_take_the_room_held_for_another_regions_request(
    api: Api,
) -> None:
    """While the hold lasts, the room is taken for every request but the one it is held for:
    a submission that starts now is rejected, the snapshot of decisions shows the room
    taken, the held request's candidates show it free, and so do the timelines the national
    brain plans waiting requests on (taken until the hold ends for the others); once the
    hold lapses, a submission that starts now takes it."""
    _, user = await api.tenant_user("q-room-now")
    holder = await _submit(api, user, ascend_body(16, priority_class="low"))
    assert holder["state"] == "placed" and holder["site"] == "CC-hub"
    foreign = PlacementRequest.model_validate(
        {**ascend_body(16, priority_class="high"), "id": "other-region-now", "tenant": "q-room-now"}
    )
    room = await api.use_cases.make_room(foreign, ["CC-hub"])
    assert (room.requeued, room.site_id) == (1, "CC-hub"), room
    await _cancel(api, user, holder["id"])  # only the hold keeps the room now

    now = await _submit(api, user, ascend_body(16))
    assert now["state"] == "rejected", now
    live_map = api.brain.live_map
    site, ascend = live_map.map.site_index["CC-hub"], live_map.engine.arrays.accelerator_column
    snapshot, _ = await live_map.snapshot()
    assert int(snapshot.free_acc[site, ascend["Ascend910B"]]) == 0
    held, _ = await live_map.held_snapshot()
    own = held.seen_by(foreign.id, now_s=time.time())
    assert int(own.free_acc[site, ascend["Ascend910B"]]) == 16_000
    other = foreign.model_copy(update={"id": "other-region-later"})
    answer = await RegionalServicer(live_map, region_id="east").GetCandidates(
        regional_pb2.GetCandidatesRequest(
            requests_json=[request_json(foreign), request_json(other)],
            max_sites=3,
            paths_per_site=1,
        ),
        cast(Any, None),
    )
    mine, theirs = answer.answers
    assert [(c.site_id, c.free.accelerator_milli) for c in mine.candidates] == [("CC-hub", 16_000)]
    assert not theirs.candidates and theirs.reason

    timelines = ReadTimelines(sessions=api.brain.sessions, live_map=live_map)
    async with api.brain.sessions() as session:
        [hold] = await room_holds.active(session, now=datetime.now(UTC))
    for asking, free_now in ((foreign.id, 16_000), (other.id, 0), ("", 0)):
        _, profiles, _ = await timelines(["CC-hub"], [], request_id=asking)
        steps = dict(profiles)[accelerator_key(site, "Ascend910B")].steps()
        assert steps[0][1] == free_now, (asking, steps)
        assert steps[-1][1] == 16_000
        if free_now == 0:
            assert steps[1][0] == math.ceil(hold.until.timestamp()), steps

    stamp = datetime.now(UTC)
    async with api.brain.sessions.begin() as session:  # the hold ends now
        [hold] = await room_holds.active(session, now=stamp)
        await room_holds.hold(session, replace(hold, until=stamp), now=stamp)
    after = await _submit(api, user, ascend_body(16))
    assert (after["state"], after["site"]) == ("placed", "CC-hub"), after
    await _cancel(api, user, after["id"])
    await api.invariants()


async def test_room_made_for_another_regions_request_frees_the_bandwidth_its_path_lacks(
    api: Api,
) -> None:
    """CC-hub has all the compute it needs, but low work from CC fills both of its attaching
    links (100 Gbps each): a request of another region that needs 10 Gbps into CC-hub lacks
    them on every destination path, and the room made for it requeues one of that work."""
    _, user = await api.tenant_user("q-room-link")

    def low(gbps: float) -> dict[str, Any]:
        return {
            "source_province": "CC",
            "resources": {"cpu": 1, "memory_gib": 1},
            "duration_hours": 1,
            "constraints": {"min_bandwidth_gbps": gbps},
            "priority_class": "low",
        }

    holders = [await _submit(api, user, low(100)) for _ in range(2)]
    assert [(h["state"], h["site"]) for h in holders] == [("placed", "CC-hub")] * 2, holders
    attaching = ["CC-hub--CC-agg1", "CC-hub--CC-agg2"]
    assert [await _link_used_mbps(api, link) for link in attaching] == [100_000, 100_000]
    foreign = PlacementRequest.model_validate(
        {
            **ascend_body(1, priority_class="high"),
            "constraints": {"min_bandwidth_gbps": 10},
            "id": "other-region-link",
            "tenant": "q-room-link",
        }
    )
    room = await api.use_cases.make_room(foreign, ["CC-hub"])
    assert (room.requeued, room.site_id) == (1, "CC-hub"), room
    requeued = [
        view
        for view in [
            (await api.call(user, "GET", f"/v1/requests/{h['id']}")).json() for h in holders
        ]
        if view["state"] == "queued"
    ]
    assert len(requeued) == 1, requeued
    assert requeued[0]["reason"] == "preempted by a request of class high"
    used = sorted([await _link_used_mbps(api, link) for link in attaching])
    assert used == [0, 100_000]  # one attaching link is free for it now
    # With that room, it needs nothing more: no further work is requeued.
    again = await api.use_cases.make_room(foreign, ["CC-hub"])
    assert (again.requeued, again.reason) == (0, "it fits on CC-hub now")
    for one in holders:
        await _cancel(api, user, one["id"])
    async with api.brain.sessions.begin() as session:
        now = datetime.now(UTC)
        for hold in await room_holds.active(session, now=now):
            await room_holds.hold(session, replace(hold, until=now), now=now)
    await api.invariants()
