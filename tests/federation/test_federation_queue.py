"""End to end on separate processes and PostgreSQL: a cross-region request that asks to wait
is queued by its source region while the western hubs are full, and is admitted (placed by
the national brain across three brains) once one of them frees; while it waits, the national
brain plans it on the calendars of the regions and the backbone. Two waiting gangs of the east
are planned for two of a western site's nodes as they free. Room the west makes for a
request of the east (`MakeRoom`) is left to that request alone while its hold lasts, and
the hold ends when that request's part is prepared there.

The west's three hubs with H800 accelerators are made full by reports of use outside the
brains (`POST /v1/sites/{id}/usage`), and one is freed the same way.
"""

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import grpc
import httpx
import pytest

from cnbrain.national.waiting import NO_ROOM_FOR_FLOWS
from cnbrain.v1 import regional_pb2, regional_pb2_grpc
from tests.federation.ledgers import check_invariants, rows, unreleased
from tests.federation.member_requests import GPU_REQUEST, cancel, get, link_down, submit
from tests.federation_processes import LocalFederation, local_federation
from tests.polling import until

WEST_H800 = {"CQ-hub-chongqing": 256, "GS-hub-qingyang": 512, "NX-hub-zhongwei": 768}
"""The western sites with H800 accelerators, and how many each has."""


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from local_federation(
        tmp_path_factory.mktemp("queue"),
        regions=["east", "west"],
        database_prefix="cnbrain_fedq",
        shared_env={"CNBRAIN_ADMISSION_INTERVAL_S": "0.5"},
    )


def _report_h800(federation: LocalFederation, site: str, used: int) -> None:
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    answer = httpx.post(
        f"{federation.members['west'].url}/v1/sites/{site}/usage",
        json={"cpu_cores": 0, "memory_gib": 0, "accelerators": {"H800": used}},
        headers=headers,
        timeout=30,
    )
    assert answer.status_code == 204, answer.text


def _fill_the_west(federation: LocalFederation, **extra: Any) -> dict[str, Any]:
    """The western hubs' H800 all taken: Chongqing's and Qingyang's from outside the brains,
    Zhongwei's but 64, and those 64 by a two-hour request of the west (with `extra`); its
    view."""
    for site in ("CQ-hub-chongqing", "GS-hub-qingyang"):
        _report_h800(federation, site, WEST_H800[site])
    _report_h800(federation, "NX-hub-zhongwei", WEST_H800["NX-hub-zhongwei"] - 64)
    return submit(
        federation,
        "west",
        {
            "source_province": "NX",
            "resources": GPU_REQUEST["resources"],
            "constraints": {"regions_allowed": ["NX"]},
            "duration_hours": 2,
            **extra,
        },
    )


def _waiting_in_the_west(max_wait_s: int, **extra: Any) -> dict[str, Any]:
    """The README's GPU job, for the west only, asking to wait up to `max_wait_s` (with
    `extra`)."""
    return {
        **GPU_REQUEST,
        "constraints": {**GPU_REQUEST["constraints"], "regions_allowed": ["west"]},
        "start": "queue",
        "max_wait_s": max_wait_s,
        **extra,
    }


async def _cancel_and_free_the_west(
    federation: LocalFederation, east_ids: list[str], filler_id: str
) -> None:
    """Cancel the east's requests and the west's filler, free the western hubs, and check
    that nothing is left reserved and every ledger is sound."""
    for request_id in east_ids:
        assert cancel(federation, "east", request_id)["state"] == "cancelled"
    assert cancel(federation, "west", filler_id)["state"] == "cancelled"
    for site in WEST_H800:
        _report_h800(federation, site, 0)
    for url in federation.databases.values():
        assert await unreleased(url) == []
        await check_invariants(url)


def _view(federation: LocalFederation, request_id: str) -> dict[str, Any]:
    view: dict[str, Any] = get(federation, "east", f"/v1/requests/{request_id}")
    return view


async def _estimated_start(federation: LocalFederation, request_id: str, site: str) -> datetime:
    """The estimated start the east shows for its waiting `request_id`, once the national
    brain planned it, on `site`."""

    async def estimated() -> datetime | None:
        queue = _view(federation, request_id)["queue"]
        if queue is None or queue["estimated_start"] is None:
            return None
        assert queue["site"] == site, queue
        return datetime.fromisoformat(queue["estimated_start"])

    return await until(estimated, "the national brain's estimated start", 60)


def _events(federation: LocalFederation, request_id: str) -> list[str]:
    events = get(federation, "east", f"/v1/requests/{request_id}/events")["events"]
    return [event["kind"] for event in events]


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_cross_region_request_waits_and_is_admitted_when_the_western_hub_frees(
    federation: LocalFederation,
) -> None:
    for site, count in WEST_H800.items():
        _report_h800(federation, site, count)
    body = _waiting_in_the_west(600)
    view = submit(federation, "east", body)
    assert view["state"] == "queued", view

    async def planned() -> dict[str, Any] | None:
        now = _view(federation, view["id"])
        return now if now["queue"] is not None else None

    async def admitted() -> dict[str, Any] | None:
        now = _view(federation, view["id"])
        return now if now["state"] == "placed" else None

    waiting = await until(planned, "the queued request's place in the queue")
    assert waiting["state"] == "queued"
    assert "national brain" in waiting["queue"]["reason"]

    _report_h800(federation, "NX-hub-zhongwei", 0)
    placed = await until(admitted, "the request admitted once the western hub frees", 60)
    assert placed["site"] == "NX-hub-zhongwei"
    segments = placed["decision"]["path"]["segments"]
    assert [(s["kind"], s["owner"]) for s in segments] == [
        ("source", "east"),
        ("backbone", "national"),
        ("destination", "west"),
    ]
    events = _events(federation, view["id"])
    # Planned at most once: when the hub had freed but the west's last summary did not yet
    # show it, the national brain's calendars did.
    assert events in (
        ["submitted", "queued", "admitted"],
        ["submitted", "queued", "planned", "admitted"],
    )
    for url in federation.databases.values():
        await check_invariants(url)

    assert cancel(federation, "east", view["id"])["state"] == "cancelled"
    for url in federation.databases.values():
        assert await unreleased(url) == []
        await check_invariants(url)


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_cross_region_request_that_waits_gets_the_national_brains_estimated_start(
    federation: LocalFederation,
) -> None:
    """The western hubs are full: two from outside the brains, Zhongwei by a two-hour
    reservation of the west for its last 64 H800. The national brain plans the east's
    request on the calendars: it may start at Zhongwei when that reservation ends."""
    filler = _fill_the_west(federation)
    waiting = await _planned_when_the_filler_ends(federation, filler)
    assert "planned by the national brain on NX-hub-zhongwei" in waiting["queue"]["reason"]
    assert _events(federation, waiting["id"]) == ["submitted", "queued", "planned"]
    await _cancel_and_free_the_west(federation, [waiting["id"]], filler["id"])


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_waiting_request_is_planned_around_a_link_its_owner_has_down(
    federation: LocalFederation,
) -> None:
    """As above, with the west's operator reporting down the first link of the best path from
    its gateway to Zhongwei. The national brain asks the west for its segment of the
    request's route, and the west answers around that link: the request is planned at
    Zhongwei when the reservation there ends. On the national brain's own copy of the map the
    route crossed the link down, which has nothing free on the west's calendar: the request
    had no start there."""
    with link_down(federation, "west", "NX-gw--NX-agg-2"):
        filler = _fill_the_west(federation)
        waiting = await _planned_when_the_filler_ends(federation, filler)
    await _cancel_and_free_the_west(federation, [waiting["id"]], filler["id"])


async def _planned_when_the_filler_ends(
    federation: LocalFederation, filler: dict[str, Any]
) -> dict[str, Any]:
    """The east's request for the west, submitted to wait four hours while `filler` (the
    west's two-hour request) holds Zhongwei's last H800: its view once planned there, to
    start when `filler` ends."""
    assert (filler["state"], filler["site"]) == ("placed", "NX-hub-zhongwei"), filler
    view = submit(federation, "east", _waiting_in_the_west(4 * 3600))
    assert view["state"] == "queued", view

    async def estimated() -> dict[str, Any] | None:
        now = _view(federation, view["id"])
        queue = now["queue"]
        return now if queue is not None and queue["estimated_start"] is not None else None

    waiting = await until(estimated, "the national brain's estimated start", 60)
    queue = waiting["queue"]
    assert queue["site"] == "NX-hub-zhongwei", queue
    ends = datetime.fromisoformat(filler["created_at"]) + timedelta(hours=2)
    start = datetime.fromisoformat(queue["estimated_start"])
    assert abs((start - ends).total_seconds()) < 120, (start, ends)
    return waiting


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_second_waiting_request_is_planned_after_the_first_ones_plan(
    federation: LocalFederation,
) -> None:
    """Zhongwei's last 64 H800 free in two hours; two one-hour requests of the east wait for
    them. The first is planned when they free, the second an hour later, after the first's
    plan, not on the same room."""
    filler = _fill_the_west(federation)
    assert (filler["state"], filler["site"]) == ("placed", "NX-hub-zhongwei"), filler
    body = _waiting_in_the_west(6 * 3600, duration_hours=1)
    starts: list[datetime] = []
    views: list[dict[str, Any]] = []
    for _ in range(2):
        view = submit(federation, "east", body)
        assert view["state"] == "queued", view
        starts.append(await _estimated_start(federation, view["id"], "NX-hub-zhongwei"))
        views.append(view)
    ends = datetime.fromisoformat(filler["created_at"]) + timedelta(hours=2)
    assert abs((starts[0] - ends).total_seconds()) < 120, (starts, ends)
    assert abs((starts[1] - starts[0]).total_seconds() - 3600) < 120, starts
    reason = _view(federation, views[1]["id"])["queue"]["reason"]
    assert "around 1 other waiting requests' plans" in reason, (
        reason,
        "the plans of requests cancelled before are dropped",
    )

    await _cancel_and_free_the_west(federation, [view["id"] for view in views], filler["id"])


@pytest.mark.asyncio
@pytest.mark.slow
async def test_two_waiting_gangs_are_planned_for_two_nodes_as_they_free(
    federation: LocalFederation,
) -> None:
    """Each of Chongqing's 32 H800 nodes holds a one-node job of 5 H800 of the west, the
    first for an hour, the second for two, the others for three: its totals (96 free) hold
    two one-node gangs of 8 of the east, its nodes none until a job ends. The first gang is
    planned for the first job's end, the second for the second's, around the first's plan
    (the west books the gangs the national brain planned there before it answers)."""

    def one_node(province: str, h800: int, hours: int, **extra: Any) -> dict[str, Any]:
        """A job from `province` of one node of `h800` H800 at Chongqing, for `hours`."""
        return {
            "source_province": province,
            "resources": {
                "nodes": 1,
                "cpu": 8,
                "memory_gib": 64,
                "accelerator": {"model": "H800", "count": h800},
            },
            "constraints": {"regions_allowed": ["CQ"]},
            "duration_hours": hours,
            **extra,
        }

    held = []
    for node in range(32):
        view = submit(federation, "west", one_node("CQ", 5, min(node + 1, 3)))
        assert (view["state"], view["site"]) == ("placed", "CQ-hub-chongqing"), view
        held.append(view)
    ends = [
        datetime.fromisoformat(view["created_at"]) + timedelta(hours=h)
        for view, h in ((held[0], 1), (held[1], 2))
    ]
    gang = one_node("ZJ", 8, 2, start="queue", max_wait_s=6 * 3600)
    starts: list[datetime] = []
    waiting: list[str] = []
    for _ in range(2):
        view = submit(federation, "east", gang)
        assert view["state"] == "queued", view
        waiting.append(view["id"])
        starts.append(await _estimated_start(federation, view["id"], "CQ-hub-chongqing"))
    for start, end in zip(starts, ends, strict=True):
        assert abs((start - end).total_seconds()) < 120, (starts, ends)

    for request_id in waiting:
        assert cancel(federation, "east", request_id)["state"] == "cancelled"
    for view in held:
        assert cancel(federation, "west", view["id"])["state"] == "cancelled"
    for url in federation.databases.values():
        assert await unreleased(url) == []
        await check_invariants(url)


async def _placed_by_preemption(
    federation: LocalFederation, **extra: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Zhongwei's last 64 H800 held for two hours by a low-class request of the west; a
    high-class request of the east (with `extra`) that may wait only a minute, placed there
    once the west has requeued the low-class one, which the room held for it took: its view
    and the victim's."""
    victim = _fill_the_west(federation, priority_class="low")
    assert (victim["state"], victim["site"]) == ("placed", "NX-hub-zhongwei"), victim
    view = submit(federation, "east", _waiting_in_the_west(60, priority_class="high", **extra))
    assert view["state"] == "queued", view

    async def admitted() -> dict[str, Any] | None:
        now = _view(federation, view["id"])
        return now if now["state"] == "placed" else None

    placed = await until(admitted, "the high-class request placed after the preemption", 60)
    assert placed["site"] == "NX-hub-zhongwei"
    # Its part at Zhongwei took the room held for it: the hold ended with the prepare.
    assert await _holds(federation) == []
    requeued = get(federation, "west", f"/v1/requests/{victim['id']}")
    assert requeued["state"] == "queued"
    assert requeued["reason"] == "preempted by a request of class high"
    return placed, victim


@pytest.mark.asyncio
@pytest.mark.slow
async def test_the_national_brain_has_the_destination_preempt_for_a_higher_class_request(
    federation: LocalFederation,
) -> None:
    """A high-class request of the east has the west requeue a low-class one, and is placed
    at once (`_placed_by_preemption`)."""
    placed, victim = await _placed_by_preemption(federation)
    kinds = [
        e["kind"] for e in get(federation, "west", f"/v1/requests/{victim['id']}/events")["events"]
    ]
    at = kinds.index("preempted")
    assert kinds[at : at + 2] == ["preempted", "queued"], kinds  # then planned in the west
    assert _events(federation, placed["id"])[-1] == "admitted"
    for url in federation.databases.values():
        await check_invariants(url)
    await _cancel_and_free_the_west(federation, [placed["id"]], victim["id"])


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_higher_class_request_with_flows_has_the_destination_preempt_for_it(
    federation: LocalFederation,
) -> None:
    """As above, for a request that stages 45 GB from Qingpu: with no start within its
    minute, it too is placed at Zhongwei once room is made, its staging crossing the
    backbone from now."""
    staging = {"source": {"site": "SH-hub-qingpu"}, "volume_gb": 45, "max_rate_gbps": 10}
    placed, victim = await _placed_by_preemption(federation, flows={"staging": [staging]})
    assert [flow["kind"] for flow in placed["flows"]] == ["staging"]
    await _cancel_and_free_the_west(federation, [placed["id"]], victim["id"])


@pytest.mark.asyncio
@pytest.mark.slow
async def test_no_work_is_preempted_for_a_request_whose_flows_could_not_start_now(
    federation: LocalFederation,
) -> None:
    """As above, but Qingpu's two links carry 399 of their 400 Gbps from outside the brains:
    its staging could not start now at any of its rates (10, 5 or 2.5 Gbps), so the west is
    not asked to make room. The low-class request keeps Zhongwei, and the request's plan
    says why."""
    east = federation.members["east"].url
    headers = {"Authorization": f"Bearer {federation.admin_token}"}

    def carry(gbps: float) -> None:
        for link in ("SH-hub-qingpu--SH-agg-1", "SH-hub-qingpu--SH-agg-2"):
            answer = httpx.post(
                f"{east}/v1/links/{link}/usage",
                json={"bandwidth_gbps": gbps},
                headers=headers,
                timeout=30,
            )
            assert answer.status_code == 204, answer.text

    carry(399)
    try:
        victim = _fill_the_west(federation, priority_class="low")
        assert (victim["state"], victim["site"]) == ("placed", "NX-hub-zhongwei"), victim
        staging = {"source": {"site": "SH-hub-qingpu"}, "volume_gb": 45, "max_rate_gbps": 10}
        view = submit(
            federation,
            "east",
            _waiting_in_the_west(60, priority_class="high", flows={"staging": [staging]}),
        )

        async def explained() -> dict[str, Any] | None:
            now = _view(federation, view["id"])
            plan = now["queue"] or {}
            return now if NO_ROOM_FOR_FLOWS in plan.get("reason", "") else None

        waiting = await until(explained, "the plan saying why no room is made", 30)
        assert waiting["state"] == "queued", waiting
        kept = get(federation, "west", f"/v1/requests/{victim['id']}")
        assert (kept["state"], kept["site"]) == ("placed", "NX-hub-zhongwei"), kept
        assert await _holds(federation) == []
        await _cancel_and_free_the_west(federation, [view["id"]], victim["id"])
    finally:
        carry(0)


async def _holds(federation: LocalFederation) -> list[str]:
    """The requests the west holds room for, lapsed or not."""
    found = await rows(federation.databases["west"], "SELECT request_id FROM room_holds")
    return sorted(row["request_id"] for row in found)


def _make_room(
    federation: LocalFederation, request: dict[str, Any], site_ids: list[str]
) -> regional_pb2.MakeRoomResponse:
    """The west asked to make room for `request` on `site_ids`, as the national brain asks."""
    west = federation.members["west"]
    metadata = (("authorization", f"Bearer {west.env['CNBRAIN_PEER_TOKEN']}"),)
    with grpc.insecure_channel(f"127.0.0.1:{west.grpc_port}") as channel:
        answer: regional_pb2.MakeRoomResponse = regional_pb2_grpc.RegionalBrainServiceStub(
            channel
        ).MakeRoom(
            regional_pb2.MakeRoomRequest(request_json=json.dumps(request), site_ids=site_ids),
            timeout=30,
            metadata=metadata,
        )
    return answer


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_request_that_starts_now_at_the_destination_cannot_take_the_held_room(
    federation: LocalFederation,
) -> None:
    """The west makes room at Zhongwei for a high-class request of the east (its low-class
    request there requeued) that nobody places within the test: while the hold lasts, a
    request of the west that starts now and fits only there is not placed, and the victim
    stays queued."""
    victim = _fill_the_west(federation, priority_class="low")
    assert (victim["state"], victim["site"]) == ("placed", "NX-hub-zhongwei"), victim
    held_for = {
        **GPU_REQUEST,
        "id": "east-held-room",
        "tenant": "acme",
        "constraints": {**GPU_REQUEST["constraints"], "regions_allowed": ["west"]},
        "priority_class": "high",
    }
    room = _make_room(federation, held_for, ["NX-hub-zhongwei"])
    assert (room.requeued, room.site_id) == (1, "NX-hub-zhongwei"), room
    assert await _holds(federation) == ["east-held-room"]

    now = submit(
        federation,
        "west",
        {
            "source_province": "NX",
            "resources": GPU_REQUEST["resources"],
            "constraints": {"regions_allowed": ["NX"]},
            "duration_hours": 2,
        },
    )
    assert now["state"] == "rejected", now
    requeued = get(federation, "west", f"/v1/requests/{victim['id']}")
    assert requeued["state"] == "queued", requeued
    assert await _holds(federation) == ["east-held-room"]
    for url in federation.databases.values():
        await check_invariants(url)

    assert cancel(federation, "west", victim["id"])["state"] == "cancelled"
    await rows(federation.databases["west"], "DELETE FROM room_holds")
    for site in WEST_H800:  # a change of capacity: the west reads its ledger again
        _report_h800(federation, site, 0)
    for url in federation.databases.values():
        assert await unreleased(url) == []
        await check_invariants(url)
