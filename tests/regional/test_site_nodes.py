"""A site's nodes over the operator API: its pools with what the brain's reservations leave
free, staff only; a simulated site reports no nodes of its own. A queued gang that the site's
totals hold but none of its nodes is planned for when a node frees, and admitted once one
does; a higher class gang, of this region's queue or another's, has the lower work on one
node preempted."""

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from cnbrain.domain.request import PlacementRequest
from cnbrain.federation.codec import request_json
from cnbrain.ledger.keys import ResourceKey
from cnbrain.national.wait_planner import waiting_for_nodes
from cnbrain.regional.federation import RegionalServicer
from cnbrain.regional.use_cases.timelines import ReadTimelines
from cnbrain.scheduling.backfill import PlanOption
from cnbrain.storage import room_holds
from cnbrain.v1 import regional_pb2
from tests.regional.brain_api import Api, detail_of

pytestmark = pytest.mark.asyncio(loop_scope="module")

BEIJING_A100 = {
    "source_province": "BJ",
    "resources": {
        "nodes": 2,
        "cpu": 8,
        "memory_gib": 64,
        "accelerator": {"model": "A100", "count": 6},
    },
    "constraints": {"regions_allowed": ["BJ"]},
    "duration_hours": 1,
}
"""Two nodes of 6 A100: only BJ-dc-1 has A100 in Beijing (4 nodes of 8)."""


async def test_a_sites_pools_show_what_its_reservations_leave_free(api: Api) -> None:
    before = await api.as_admin("GET", "/v1/sites/BJ-dc-1/nodes")
    assert before.status_code == 200, before.text
    view = before.json()
    assert (view["site"], view["reported"], view["reported_error"]) == ("BJ-dc-1", None, None)
    a100 = next(p for p in view["pools"] if p["accelerator"] == "A100")
    assert (a100["count"], a100["accelerators"]) == (4, 8)
    assert a100["nodes_by_free"] == [0] * 8 + [4] and a100["shared_by_free"] == []
    assert a100["held"] == []
    _, _, user = await api.tenant()
    made = await api.call(user, "POST", "/v1/requests", json=BEIJING_A100)
    assert made.json()["site"] == "BJ-dc-1", made.text
    after = (await api.as_admin("GET", "/v1/sites/BJ-dc-1/nodes")).json()
    a100 = next(p for p in after["pools"] if p["accelerator"] == "A100")
    assert a100["nodes_by_free"] == [0, 0, 2, 0, 0, 0, 0, 0, 2]
    assert a100["held"] == [[6, 0, 2]]  # two node takes of 6 A100
    cancelled = await api.call(user, "POST", f"/v1/requests/{made.json()['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    again = (await api.as_admin("GET", "/v1/sites/BJ-dc-1/nodes")).json()
    assert again["pools"] == view["pools"]


def _one_node(a100: int, **extra: Any) -> dict[str, Any]:
    """One node of `a100` A100 in Beijing (with `extra`)."""
    resources = {
        "nodes": 1,
        "cpu": 8,
        "memory_gib": 64,
        "accelerator": {"model": "A100", "count": a100},
    }
    return {**BEIJING_A100, "resources": resources, **extra}


async def _one_job_on_each_node(api: Api, user: str, **extra: Any) -> list[str]:
    """Four one-node jobs of 5 A100 (with `extra`), placed one on each of BJ-dc-1's four A100
    nodes; their ids."""
    held = []
    for _ in range(4):
        made = await api.call(user, "POST", "/v1/requests", json=_one_node(5, **extra))
        assert made.json()["site"] == "BJ-dc-1", made.text
        held.append(made.json()["id"])
    return held


async def _jobs_of_one_to_four_hours(
    api: Api, user: str
) -> tuple[list[dict[str, Any]], list[datetime]]:
    """Four one-node jobs of 5 A100, one on each of BJ-dc-1's four A100 nodes, of 1, 2, 3
    and 4 hours; their views, and when each ends."""
    held = []
    for hours in (1, 2, 3, 4):
        made = await api.call(user, "POST", "/v1/requests", json=_one_node(5, duration_hours=hours))
        assert made.json()["site"] == "BJ-dc-1", made.text
        held.append(made.json())
    ends = [
        datetime.fromisoformat(job["created_at"]) + timedelta(hours=hours)
        for hours, job in zip((1, 2, 3, 4), held, strict=True)
    ]
    return held, ends


async def _cancel(api: Api, user: str, request_ids: list[str]) -> None:
    for request_id in request_ids:
        gone = await api.call(user, "POST", f"/v1/requests/{request_id}/cancel")
        assert gone.status_code == 200, gone.text


async def test_a_gang_the_sites_totals_hold_but_no_node_is_planned_for_when_one_frees(
    api: Api,
) -> None:
    tenant, _, user = await api.tenant()
    held = await _one_job_on_each_node(api, user)
    first = (await api.call(user, "GET", f"/v1/requests/{held[0]}")).json()
    view = (await api.as_admin("GET", "/v1/sites/BJ-dc-1/nodes")).json()
    a100 = next(p for p in view["pools"] if p["accelerator"] == "A100")
    assert a100["nodes_by_free"] == [0, 0, 0, 4, 0, 0, 0, 0, 0]  # 12 A100 free, 3 a node
    body = _one_node(8, start="queue", max_wait_s=3600)
    waiting = (await api.call(user, "POST", "/v1/requests", json=body)).json()
    assert waiting["state"] == "queued", waiting

    async def view_when(done: Any) -> dict[str, Any]:
        for _ in range(300):
            now: dict[str, Any] = (
                await api.call(user, "GET", f"/v1/requests/{waiting['id']}")
            ).json()
            if done(now):
                return now
            await asyncio.sleep(0.1)
        raise AssertionError(f"{waiting['id']}: {now}")

    planned = await view_when(lambda v: v["queue"] is not None)
    queue = planned["queue"]
    assert queue["site"] == "BJ-dc-1", queue
    assert queue["reason"].startswith("planned on BJ-dc-1 from "), queue
    first_end = datetime.fromisoformat(first["created_at"]) + timedelta(hours=1)
    start = datetime.fromisoformat(queue["estimated_start"])
    assert abs((start - first_end).total_seconds()) < 60, (start, first_end)
    assert f"; the nodes it needs on BJ-dc-1 free at {start.isoformat()}" in queue["reason"]

    # The national brain, planning such a gang of another region, is told the same.
    live_map = api.brain.live_map
    servicer = RegionalServicer(
        live_map,
        region_id="north",
        timelines=ReadTimelines(sessions=api.brain.sessions, live_map=live_map),
    )
    foreign = PlacementRequest.model_validate(
        {**_one_node(8), "id": "other-region-waits", "tenant": tenant}
    )
    asked = regional_pb2.GetTimelinesRequest(
        site_ids=["BJ-dc-1"], request_id=foreign.id, request_json=request_json(foreign)
    )
    answer = await servicer.GetTimelines(asked, cast(Any, None))
    [nodes] = answer.nodes_free_at
    assert nodes.site_id == "BJ-dc-1"
    assert abs(nodes.at_s - first_end.timestamp()) < 60, (nodes.at_s, first_end)
    option: PlanOption[ResourceKey] = PlanOption("BJ-dc-1", {})
    [waits] = waiting_for_nodes([option], {"north": answer}, live_map.engine.arrays)
    assert waits.nodes_free_at == nodes.at_s
    small = PlacementRequest.model_validate({**_one_node(3), "id": "fits-now", "tenant": tenant})
    fits = regional_pb2.GetTimelinesRequest(
        site_ids=["BJ-dc-1"], request_id=small.id, request_json=request_json(small)
    )
    assert not (await servicer.GetTimelines(fits, cast(Any, None))).nodes_free_at

    cancelled = await api.call(user, "POST", f"/v1/requests/{held.pop()}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    placed = await view_when(lambda v: v["state"] != "queued")
    assert (placed["state"], placed["site"]) == ("placed", "BJ-dc-1"), placed
    await _cancel(api, user, [*held, waiting["id"]])


async def test_two_gangs_waiting_for_nodes_are_planned_for_two_nodes_as_they_free(
    api: Api,
) -> None:
    """Four one-node jobs of 5 A100, one on each node, of 1 to 4 hours: the first queued
    gang of one node of 8 is planned for when the first job ends, and the second for when
    the second ends, not on the node the first gang will hold."""
    tenant, _, user = await api.tenant()
    held, ends = await _jobs_of_one_to_four_hours(api, user)
    body = _one_node(8, start="queue", max_wait_s=4 * 3600, duration_hours=2)
    gangs = [(await api.call(user, "POST", "/v1/requests", json=body)).json() for _ in range(2)]
    assert [g["state"] for g in gangs] == ["queued", "queued"], gangs
    for _ in range(300):
        views = [(await api.call(user, "GET", f"/v1/requests/{g['id']}")).json() for g in gangs]
        if all(v["queue"] is not None for v in views):
            break
        await asyncio.sleep(0.1)
    starts = [datetime.fromisoformat(v["queue"]["estimated_start"]) for v in views]
    for start, end in zip(starts, ends[:2], strict=True):
        assert abs((start - end).total_seconds()) < 60, (starts, ends)
    reasons = [v["queue"]["reason"] for v in views]
    assert f"the nodes it needs on BJ-dc-1 free at {starts[0].isoformat()}" in reasons[0]
    assert reasons[1] == (
        f"planned on BJ-dc-1 from {starts[1].isoformat()}; the nodes it needs on BJ-dc-1 "
        "hold it then, around the gangs planned before it"
    ), reasons

    # So the region answers the national brain, around a gang it planned there before.
    servicer = RegionalServicer(
        api.brain.live_map,
        region_id="north",
        timelines=ReadTimelines(sessions=api.brain.sessions, live_map=api.brain.live_map),
    )
    foreign = PlacementRequest.model_validate(
        {**_one_node(8), "id": "other-region-waits", "tenant": tenant}
    )
    first_end = int(ends[0].timestamp())
    planned = regional_pb2.PlannedGang(
        site_id="BJ-dc-1",
        nodes=1,
        cpu_m=8000,
        mem_mib=65_536,
        accelerator_model="A100",
        accelerator_milli=8000,
        start_s=first_end,
        end_s=first_end + 7200,
    )
    for around, end in (([], ends[0]), ([planned], ends[1])):
        asked = regional_pb2.GetTimelinesRequest(
            site_ids=["BJ-dc-1"],
            request_id=foreign.id,
            request_json=request_json(foreign),
            planned_gangs=around,
        )
        [nodes] = (await servicer.GetTimelines(asked, cast(Any, None))).nodes_free_at
        assert abs(nodes.at_s - end.timestamp()) < 60, (around, nodes.at_s, ends)
    await _cancel(api, user, [*(job["id"] for job in held), *(g["id"] for g in gangs)])


async def test_work_behind_waiting_gangs_is_admitted_off_the_nodes_they_wait_for(
    api: Api,
) -> None:
    """Four one-node jobs of 5 A100, one on each node, of 1 to 4 hours; three queued gangs
    of one node of 8 wait for the first three jobs' nodes. A queued job of 2 A100 for five
    hours fits now on any node: it is admitted onto the fourth, and each gang still starts
    when its node's job ends."""
    _, _, user = await api.tenant()
    held, ends = await _jobs_of_one_to_four_hours(api, user)
    body = _one_node(8, start="queue", max_wait_s=5 * 3600, duration_hours=2)
    gangs = [(await api.call(user, "POST", "/v1/requests", json=body)).json() for _ in range(3)]
    small = _one_node(2, start="queue", max_wait_s=3600, duration_hours=5)
    behind = (await api.call(user, "POST", "/v1/requests", json=small)).json()

    async def view(request_id: str) -> dict[str, Any]:
        answer: dict[str, Any] = (await api.call(user, "GET", f"/v1/requests/{request_id}")).json()
        return answer

    for _ in range(600):
        placed = await view(behind["id"])
        waiting = [await view(g["id"]) for g in gangs]
        # Planned by a round that began after the admission (its plans were read later).
        if placed["state"] == "placed" and all(
            w["queue"] is not None
            and datetime.fromisoformat(w["queue"]["planned_at"])
            > datetime.fromisoformat(placed["updated_at"]) + timedelta(seconds=1)
            for w in waiting
        ):
            break
        await asyncio.sleep(0.1)
    assert (placed["state"], placed["site"]) == ("placed", "BJ-dc-1"), placed
    starts = [datetime.fromisoformat(w["queue"]["estimated_start"]) for w in waiting]
    for start, end in zip(starts, ends[:3], strict=True):
        assert abs((start - end).total_seconds()) < 60, (starts, ends)
    await _cancel(api, user, [*(j["id"] for j in held), *(g["id"] for g in gangs), behind["id"]])


async def test_a_higher_class_gang_preempts_the_lower_work_on_one_node_it_needs(
    api: Api,
) -> None:
    """Four low one-node jobs of 5 A100, one on each node: the site's totals hold a high
    gang of one node of 8, none of its nodes does until one of those jobs ends. The gang
    cannot wait that long: one of them is preempted, and it is admitted."""
    _, _, user = await api.tenant()
    held = await _one_job_on_each_node(api, user, priority_class="low")
    body = _one_node(8, start="queue", priority_class="high", max_wait_s=60)
    urgent = (await api.call(user, "POST", "/v1/requests", json=body)).json()
    assert urgent["state"] == "queued", urgent
    for _ in range(300):
        view = (await api.call(user, "GET", f"/v1/requests/{urgent['id']}")).json()
        if view["state"] != "queued":
            break
        await asyncio.sleep(0.1)
    assert (view["state"], view["site"]) == ("placed", "BJ-dc-1"), view
    views = [(await api.call(user, "GET", f"/v1/requests/{i}")).json() for i in held]
    preempted = [v for v in views if v["state"] == "queued"]
    assert len(preempted) == 1, [v["state"] for v in views]
    assert preempted[0]["reason"] == "preempted by a request of class high"
    await api.invariants()
    await _cancel(api, user, [*held, urgent["id"]])


async def test_room_made_for_another_regions_gang_frees_one_of_its_nodes(api: Api) -> None:
    """As above, for a gang of another region's queue: the room the national brain asks
    for (`MakeRoom`) is one node's low job preempted."""
    tenant, _, user = await api.tenant()
    held = await _one_job_on_each_node(api, user, priority_class="low")
    foreign = PlacementRequest.model_validate(
        {**_one_node(8, priority_class="high"), "id": "other-region-gang", "tenant": tenant}
    )
    room = await api.use_cases.make_room(foreign, ["BJ-dc-1"])
    assert (room.requeued, room.site_id) == (1, "BJ-dc-1"), room
    views = [(await api.call(user, "GET", f"/v1/requests/{i}")).json() for i in held]
    assert sorted(v["state"] for v in views) == ["placed", "placed", "placed", "queued"]
    now = datetime.now(UTC)
    async with api.brain.sessions.begin() as session:  # the hold ends now
        [hold] = await room_holds.active(session, now=now)
        await room_holds.hold(session, dataclasses.replace(hold, until=now), now=now)
    await _cancel(api, user, held)
    await api.invariants()


async def test_only_staff_see_a_sites_nodes_and_an_unknown_site_is_404(api: Api) -> None:
    _, _, user = await api.tenant()
    detail_of(await api.call(user, "GET", "/v1/sites/BJ-dc-1/nodes"), 403)
    assert "ZZ-nowhere" in detail_of(await api.as_admin("GET", "/v1/sites/ZZ-nowhere/nodes"), 404)
