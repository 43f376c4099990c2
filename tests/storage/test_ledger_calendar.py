"""The ledger's calendar on PostgreSQL and SQLite: stored reservations and cross-brain parts
hold over their windows; free now is the snapshot's; a release gives back the rest of a
window at once."""

import dataclasses
from datetime import timedelta

import pytest
import pytest_asyncio

from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.ledger.claim import Claim
from cnbrain.ledger.keys import ResourceKey, accelerator_key, link_key, site_key
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import ledger_store, peer_ledger, registry
from cnbrain.storage.clock import utcnow
from cnbrain.storage.requests import NewRequest, insert_requests
from cnbrain.storage.tenants import create_tenant, create_user
from tests.databases import Sessions
from tests.storage.capacity import leave_cpu_free

pytestmark = pytest.mark.asyncio

TENANT = "acme"
NOW = 1_800_000_000
HOUR = 3600


@pytest_asyncio.fixture
async def ledger(sessions: Sessions, seeded: MapArrays) -> MapArrays:
    async with sessions.begin() as session:
        await create_tenant(session, tenant_id=TENANT, name="Acme")
        await create_user(
            session, user_id="alice", name="Alice", role="tenant-user", tenant_id=TENANT
        )
    return seeded


def _claim(arrays: MapArrays, name: str, site: int, window: Window, **changes: object) -> Claim:
    """2 cores, 4 GiB, 5 GiB, 1 x T4 on site `site`, 100 Mbps on its attachment links."""
    site_id = arrays.map.sites[site].id
    links = tuple(sorted(link.id for link in arrays.map.links if site_id in (link.a, link.b)))
    claim = Claim(
        reservation_id=f"rsv-{name}",
        request_id=f"req-{name}",
        tenant_id=TENANT,
        site_id=site_id,
        cpu_m=2000,
        mem_mib=4096,
        storage_gib=5,
        accelerator_model="T4",
        accelerator_milli=1000,
        link_ids=links,
        mbps=100,
        window=window,
    )
    return dataclasses.replace(claim, **changes)  # type: ignore[arg-type]


async def _reserve(sessions: Sessions, claims: list[Claim]) -> None:
    async with sessions.begin() as session:
        await insert_requests(
            session,
            [
                NewRequest(request_id=c.request_id, tenant_id=TENANT, user_id="alice", body={})
                for c in claims
            ],
        )
        await ledger_store.reserve_many(session, claims=claims)


async def _prepare(sessions: Sessions, part: Claim) -> None:
    async with sessions.begin() as session:
        assert await peer_ledger.prepare(
            session, claim=part, expires_at=utcnow() + timedelta(minutes=5)
        )


async def _calendar(sessions: Sessions, arrays: MapArrays, now: int) -> Calendar[ResourceKey]:
    async with sessions() as session:
        return await ledger_store.calendar_of(session, arrays=arrays, now=now)


async def _snapshot(sessions: Sessions, arrays: MapArrays) -> Snapshot:
    async with sessions() as session:
        return await ledger_store.load_snapshot(session, arrays=arrays)


def _free_now(calendar: Calendar[ResourceKey], snapshot: Snapshot) -> dict[ResourceKey, int]:
    """Every resource of `calendar` whose free amount now differs from `snapshot`'s, with
    the calendar's amount; also fails on a snapshot pool the calendar does not hold."""
    arrays = snapshot.arrays
    expected: dict[ResourceKey, int] = {}
    for i in range(arrays.n_sites):
        expected[site_key(i, "cpu_m")] = int(snapshot.free_cpu_m[i])
        expected[site_key(i, "mem_mib")] = int(snapshot.free_mem_mib[i])
        expected[site_key(i, "storage_gib")] = int(snapshot.free_storage_gib[i])
        for model, column in arrays.accelerator_column.items():
            key = accelerator_key(i, model)
            if key in calendar or snapshot.free_acc[i, column]:
                expected[key] = int(snapshot.free_acc[i, column])
    for j in range(len(arrays.map.links)):
        expected[link_key(j)] = int(snapshot.residual_mbps[j])
    now = calendar.now
    differing = {
        key: calendar.profile(key).free_at(now) if key in calendar else -1
        for key, free in expected.items()
        if key not in calendar or calendar.profile(key).free_at(now) != free
    }
    assert len(calendar) == len(expected)
    return differing


async def test_free_now_in_the_calendar_is_the_snapshot(
    sessions: Sessions, ledger: MapArrays
) -> None:
    await _reserve(
        sessions,
        [
            _claim(ledger, "a", 0, Window(NOW - HOUR, NOW + HOUR)),
            _claim(ledger, "b", 0, Window(NOW - 60, NOW + 3 * HOUR), accelerator_milli=3000),
            _claim(ledger, "c", 1, Window(NOW, NOW + 1), mbps=250),
            _claim(
                ledger,
                "d",
                2,
                Window(NOW - 10, NOW + 10),
                accelerator_model=None,
                accelerator_milli=0,
            ),
        ],
    )
    await _prepare(
        sessions,
        _claim(ledger, "part", 1, Window(NOW - 5, NOW + HOUR), counts_quota=False),
    )
    await _prepare(
        sessions,
        _claim(ledger, "links", 0, Window(NOW, NOW + 2 * HOUR), counts_quota=False, site_id=None),
    )
    async with sessions.begin() as session:
        # Others use site 2 (more than this brain left free: held exceeds its capacity now).
        await leave_cpu_free(session, ledger.map.sites[2].id, 1000)
        await registry.report_link_usage(session, link_id=ledger.map.links[5].id, mbps=700)
        await registry.retire_site(session, site_id=ledger.map.sites[3].id)
        await ledger_store.check_invariants(session, require_fit=False)

    calendar = await _calendar(sessions, ledger, NOW)
    snapshot = await _snapshot(sessions, ledger)

    assert _free_now(calendar, snapshot) == {}
    assert calendar.profile(site_key(2, "cpu_m")).free_at(NOW) == 0
    assert calendar.profile(site_key(3, "cpu_m")).capacity == 0  # retired


async def test_a_window_holds_until_its_end_and_a_release_gives_the_rest_back(
    sessions: Sessions, ledger: MapArrays
) -> None:
    empty = await _calendar(sessions, ledger, NOW)
    reserved = _claim(ledger, "r", 0, Window(NOW, NOW + HOUR))
    part = _claim(ledger, "p", 1, Window(NOW + 60, NOW + 2 * HOUR), counts_quota=False)
    await _reserve(sessions, [reserved])
    await _prepare(sessions, part)
    cpu, t4 = site_key(0, "cpu_m"), accelerator_key(0, "T4")
    part_cpu, link = site_key(1, "cpu_m"), link_key(ledger.link_index[part.link_ids[0]])
    full = {key: empty.profile(key).capacity for key in (cpu, t4, part_cpu, link)}

    during = await _calendar(sessions, ledger, NOW)

    assert during.profile(cpu).steps() == ((NOW, full[cpu] - 2000), (NOW + HOUR, full[cpu]))
    assert during.profile(t4).steps() == ((NOW, full[t4] - 1000), (NOW + HOUR, full[t4]))
    assert during.profile(part_cpu).steps() == (
        (NOW, full[part_cpu]),
        (NOW + 60, full[part_cpu] - 2000),
        (NOW + 2 * HOUR, full[part_cpu]),
    )
    assert during.profile(link).free_at(NOW + 60) == full[link] - 100
    assert not during.fits({cpu: full[cpu]}, Window(NOW + HOUR - 1, NOW + HOUR))
    assert during.fits({cpu: full[cpu]}, Window(NOW + HOUR, NOW + 2 * HOUR))

    # Still held after its end (its release not written yet): it holds now, and no later.
    late = NOW + HOUR + 30
    overdue = await _calendar(sessions, ledger, late)
    assert overdue.profile(cpu).steps() == (
        (late, full[cpu] - 2000),
        (late + ledger_store.OVERDUE_S, full[cpu]),
    )

    # Released a quarter of the way in: the rest of both windows is free at once.
    async with sessions.begin() as session:
        await ledger_store.release(session, reservation_id=reserved.reservation_id)
        assert await peer_ledger.release(session, reservation_id=part.reservation_id)
    after = await _calendar(sessions, ledger, NOW + HOUR // 4)
    for key, capacity in full.items():
        assert after.profile(key).steps() == ((NOW + HOUR // 4, capacity),), key


async def test_stored_windows_come_back_in_the_claims(
    sessions: Sessions, ledger: MapArrays
) -> None:
    window = Window(NOW - 7, NOW + 5 * HOUR + 3)
    claim = _claim(ledger, "w", 0, window)
    await _reserve(sessions, [claim])
    async with sessions() as session:
        assert await ledger_store.held_claims(session, request_id=claim.request_id) == [claim]
