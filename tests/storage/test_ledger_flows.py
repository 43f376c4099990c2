"""Flows in the ledger on PostgreSQL and SQLite: each holds its links over its own window on
the calendar (the snapshot, from which requests are decided to hold from now, counts the
most the flows of a link hold at once), never in the `used` columns; a batch that
would take more of a link than its calendar has free at some time of its window is refused,
naming the link; a release deletes a reservation's flows, but the delivery of a completed
job; and no sequence of batches ever holds more of a link than it has at any time."""

import dataclasses
import random
from typing import Any

import pytest
import pytest_asyncio

from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import Claim, FlowHold
from cnbrain.ledger.keys import link_key
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import ledger_store
from cnbrain.storage.clock import epoch_s, utcnow
from cnbrain.storage.errors import CapacityConflict
from cnbrain.storage.requests import NewRequest, insert_requests
from cnbrain.storage.tenants import create_tenant, create_user
from tests.databases import Sessions
from tests.ledger.claims import claim

pytestmark = pytest.mark.asyncio

TENANT = "acme"
HOUR = 3600


@pytest_asyncio.fixture
async def ledger(sessions: Sessions, seeded: MapArrays) -> MapArrays:
    async with sessions.begin() as session:
        await create_tenant(session, tenant_id=TENANT, name="Acme")
        await create_user(
            session, user_id="alice", name="Alice", role="tenant-user", tenant_id=TENANT
        )
    return seeded


def _links(arrays: MapArrays) -> tuple[int, int]:
    """Two links of the map that no site's attachment is (no claim of `_claim` crosses)."""
    sites = {site.id for site in arrays.map.sites}
    free = [
        j for j, link in enumerate(arrays.map.links) if link.a not in sites and link.b not in sites
    ]
    return free[0], free[1]


def _claim(arrays: MapArrays, name: str, window: Window, **changes: Any) -> Claim:
    """1 core on the map's first site, no bandwidth."""
    site = arrays.map.sites[0].id
    one = claim(f"rsv-{name}", f"req-{name}", TENANT, site_id=site, window=window, cpu_m=1000)
    return dataclasses.replace(one, **changes)


def _flow(name: str, kind: str, link: str, mbps: int, window: Window) -> FlowHold:
    return FlowHold(f"rsv-{name}", kind, "peer", (link,), mbps, window)


async def _reserve(sessions: Sessions, claims: list[Claim], flows: list[FlowHold]) -> None:
    async with sessions.begin() as session:
        await insert_requests(
            session,
            [
                NewRequest(request_id=c.request_id, tenant_id=TENANT, user_id="alice", body={})
                for c in claims
            ],
        )
        await ledger_store.reserve_many(session, claims=claims, flows=flows)


async def test_flows_hold_their_links_over_their_own_windows_only(
    sessions: Sessions, ledger: MapArrays
) -> None:
    j, k = _links(ledger)
    a, b = ledger.map.links[j].id, ledger.map.links[k].id
    cap_a, cap_b = int(ledger.link_cap_mbps[j]), int(ledger.link_cap_mbps[k])
    now = epoch_s(utcnow())
    staging = _flow("job", "staging", a, 1000, Window(now - 5, now + HOUR))
    delivery = _flow("job", "delivery", b, 2000, Window(now + 3 * HOUR, now + 4 * HOUR))
    await _reserve(
        sessions, [_claim(ledger, "job", Window(now - 5, now + 3 * HOUR))], [staging, delivery]
    )
    async with sessions() as session:
        calendar = await ledger_store.calendar_of(session, arrays=ledger, now=now)
        snapshot = await ledger_store.load_snapshot(session, arrays=ledger)
        held = await ledger_store.held_flows(session, request_id="req-job")
        await ledger_store.check_invariants(session)
    assert held == [staging, delivery]
    on_a, on_b = calendar.profile(link_key(j)), calendar.profile(link_key(k))
    assert on_a.free_at(now) == cap_a - 1000 and on_a.free_at(now + HOUR) == cap_a
    assert on_b.free_at(now + 2 * HOUR) == cap_b
    assert on_b.free_at(now + 3 * HOUR) == cap_b - 2000 and on_b.free_at(now + 4 * HOUR) == cap_b
    # A request decided on the snapshot holds from now: each link shows less the most its
    # flows hold at once, whenever that is.
    assert int(snapshot.residual_mbps[j]) == cap_a - 1000
    assert int(snapshot.residual_mbps[k]) == cap_b - 2000


async def test_a_batch_that_a_flow_leaves_no_room_for_at_some_time_is_refused(
    sessions: Sessions, ledger: MapArrays
) -> None:
    j, _ = _links(ledger)
    link = ledger.map.links[j].id
    cap = int(ledger.link_cap_mbps[j])
    now = epoch_s(utcnow())
    later = Window(now + 2 * HOUR, now + 3 * HOUR)
    await _reserve(
        sessions,
        [_claim(ledger, "first", Window(now, now + HOUR))],
        [_flow("first", "delivery", link, cap - 100, later)],
    )
    # Free now, by the `used` columns; not over the delivery's window.
    through = _claim(ledger, "through", Window(now, now + 4 * HOUR), link_ids=(link,), mbps=200)
    with pytest.raises(CapacityConflict) as refused:
        await _reserve(sessions, [through], [])
    assert f"link {link!r} bandwidth" in str(refused.value)
    crossing = _flow("crossing", "staging", link, 200, Window(now + 150 * 60, now + 4 * HOUR))
    with pytest.raises(CapacityConflict):
        await _reserve(sessions, [_claim(ledger, "crossing", Window(now, now + HOUR))], [crossing])
    # Before the delivery, and beside it, there is room.
    await _reserve(
        sessions,
        [
            _claim(ledger, "before", Window(now, now + HOUR), link_ids=(link,), mbps=200),
            _claim(ledger, "beside", Window(now, now + HOUR)),
        ],
        [_flow("beside", "staging", link, 100, Window(now + HOUR, now + 4 * HOUR))],
    )
    async with sessions() as session:
        await ledger_store.check_invariants(session)


async def test_a_release_deletes_the_flows_but_a_completed_jobs_delivery(
    sessions: Sessions, ledger: MapArrays
) -> None:
    j, k = _links(ledger)
    a, b = ledger.map.links[j].id, ledger.map.links[k].id
    now = epoch_s(utcnow())
    for name in ("done", "cancelled"):
        await _reserve(
            sessions,
            [_claim(ledger, name, Window(now, now + 2 * HOUR))],
            [
                _flow(name, "staging", a, 1000, Window(now, now + HOUR)),
                _flow(name, "delivery", b, 1000, Window(now + 2 * HOUR, now + 3 * HOUR)),
            ],
        )
    async with sessions.begin() as session:
        await ledger_store.release(session, reservation_id="rsv-done", keep_delivery=True)
        await ledger_store.release(session, reservation_id="rsv-cancelled")
    async with sessions() as session:
        kept = await ledger_store.held_flows(session, request_id="req-done")
        gone = await ledger_store.held_flows(session, request_id="req-cancelled")
        calendar = await ledger_store.calendar_of(session, arrays=ledger, now=now)
        await ledger_store.check_invariants(session)
    assert [flow.kind for flow in kept] == ["delivery"] and gone == []
    assert calendar.profile(link_key(j)).free_at(now) == int(ledger.link_cap_mbps[j])
    assert calendar.profile(link_key(k)).free_at(now + 2 * HOUR) == (
        int(ledger.link_cap_mbps[k]) - 1000
    )


async def test_no_sequence_of_batches_holds_more_of_a_link_than_it_has(
    sessions: Sessions, ledger: MapArrays
) -> None:
    j, _ = _links(ledger)
    link = ledger.map.links[j].id
    cap = int(ledger.link_cap_mbps[j])
    now = epoch_s(utcnow())
    draw = random.Random(15)
    held: list[tuple[int, Window]] = []
    refused = 0
    for n in range(40):
        start = now + draw.randrange(0, 6 * HOUR)
        window = Window(start, start + draw.randrange(60, 3 * HOUR))
        mbps = draw.randrange(1, cap // 2)
        name = f"r{n}"
        if draw.random() < 0.5:  # bandwidth with the compute, from now
            window = Window(now, window.end)
            claims, flows = [_claim(ledger, name, window, link_ids=(link,), mbps=mbps)], []
        else:
            kind = draw.choice(["staging", "delivery", "serving"])
            claims = [_claim(ledger, name, Window(now, now + 60))]
            flows = [_flow(name, kind, link, mbps, window)]
        try:
            await _reserve(sessions, claims, flows)
        except CapacityConflict:
            refused += 1
            continue
        held.append((mbps, window))
    assert held and refused
    async with sessions() as session:
        await ledger_store.check_invariants(session)
    for t in sorted({w.start for _, w in held}):
        assert sum(mbps for mbps, w in held if w.start <= t < w.end) <= cap, t
