"""Room holds in the database ledger, on PostgreSQL and SQLite: a reservation or a part of
another request cannot take the room held while the hold lasts, whatever its decision saw;
the held request's part takes it and ends the hold; a hold that lapsed blocks nothing.

The first site of the china map is left 8 cores free; a hold keeps 6 of them (and 1 A100)
for request `held` for 30 s."""

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from cnbrain.ledger.claim import Claim
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import ledger_store, peer_ledger, room_holds
from cnbrain.storage.clock import utcnow
from cnbrain.storage.errors import CapacityConflict
from cnbrain.storage.requests import NewRequest, insert_requests
from cnbrain.storage.tenants import create_tenant, create_user
from tests.databases import Sessions
from tests.ledger.claims import claim
from tests.storage.capacity import leave_cpu_free

pytestmark = pytest.mark.asyncio

TENANT = "acme"
HELD = "held"
"""The request the room is held for (of another region's queue: no request row here)."""


@pytest_asyncio.fixture
async def site(sessions: Sessions, seeded: MapArrays) -> str:
    """The first site, 8 cores free, 6 cores and 1 A100 of it held for `HELD` for 30 s."""
    site_id = seeded.map.sites[0].id
    now = utcnow()
    async with sessions.begin() as session:
        await create_tenant(session, tenant_id=TENANT, name="Acme")
        await create_user(
            session, user_id="alice", name="Alice", role="tenant-user", tenant_id=TENANT
        )
        await insert_requests(
            session,
            [
                NewRequest(request_id=f"local-{i}", tenant_id=TENANT, user_id="alice", body={})
                for i in range(3)
            ],
        )
        await leave_cpu_free(session, site_id, 8000)
        await room_holds.hold(session, _hold(site_id, until=now + timedelta(seconds=30)), now=now)
    return site_id


def _hold(site_id: str, *, until: datetime) -> room_holds.RoomHold:
    return room_holds.RoomHold(
        request_id=HELD,
        site_id=site_id,
        cpu_m=6000,
        mem_mib=1024,
        storage_gib=0,
        accelerator_model="A100",
        accelerator_milli=1000,
        until=until,
    )


def _claim(site_id: str, request_id: str, cpu_m: int, **changes: Any) -> Claim:
    one = claim(f"rsv-{request_id}", request_id, TENANT, site_id=site_id, cpu_m=cpu_m, mem_mib=1024)
    return dataclasses.replace(one, **changes)


async def _reserve(sessions: Sessions, claim: Claim) -> None:
    async with sessions.begin() as session:
        await ledger_store.reserve_many(session, claims=[claim])


async def _prepare(sessions: Sessions, claim: Claim) -> bool:
    async with sessions.begin() as session:
        return await peer_ledger.prepare(
            session, claim=claim, expires_at=utcnow() + timedelta(minutes=5)
        )


async def _holds(sessions: Sessions) -> list[str]:
    async with sessions() as session:
        return [hold.request_id for hold in await room_holds.active(session, now=utcnow())]


async def _check(sessions: Sessions) -> None:
    async with sessions() as session:
        await ledger_store.check_invariants(session)


async def test_other_work_cannot_take_the_held_room_while_the_hold_lasts(
    sessions: Sessions, seeded: MapArrays, site: str
) -> None:
    # A decision on a snapshot without the hold sees 8 cores free; the ledger leaves 2.
    with pytest.raises(CapacityConflict, match=r"wants 4000, 2000 free \(6000 held"):
        await _reserve(sessions, _claim(site, "local-0", 4000))
    with pytest.raises(CapacityConflict, match="held for another request"):
        await _prepare(sessions, _claim(site, "other-region", 4000, counts_quota=False))
    async with sessions() as session:
        snapshot = await ledger_store.load_snapshot(session, arrays=seeded)
    every_a100 = int(snapshot.free_acc[0, seeded.accelerator_column["A100"]])
    with pytest.raises(CapacityConflict, match=r"A100: wants .* \(1000 held"):
        await _reserve(
            sessions,
            _claim(site, "local-1", 1000, accelerator_model="A100", accelerator_milli=every_a100),
        )
    await _reserve(sessions, _claim(site, "local-0", 2000))  # what the hold leaves
    assert await _holds(sessions) == [HELD]
    await _check(sessions)


async def test_the_held_requests_part_takes_the_room_and_ends_the_hold(
    sessions: Sessions, site: str
) -> None:
    await _reserve(sessions, _claim(site, "local-0", 2000))
    # All 6 cores left are held: the held request's part takes them, with its A100.
    part = _claim(
        site, HELD, 6000, counts_quota=False, accelerator_model="A100", accelerator_milli=1000
    )
    assert await _prepare(sessions, part) is True
    assert await _holds(sessions) == []
    with pytest.raises(CapacityConflict, match=r"wants 1000, 0 free$"):
        await _reserve(sessions, _claim(site, "local-1", 1000))
    await _check(sessions)


async def test_a_refused_part_of_the_held_request_leaves_its_hold(
    sessions: Sessions, site: str
) -> None:
    with pytest.raises(CapacityConflict):
        await _prepare(sessions, _claim(site, HELD, 9000, counts_quota=False))
    assert await _holds(sessions) == [HELD]


async def test_a_hold_that_lapsed_blocks_nothing(sessions: Sessions, site: str) -> None:
    now = utcnow()
    async with sessions.begin() as session:  # the row stays, its end passed
        await room_holds.hold(session, _hold(site, until=now - timedelta(seconds=1)), now=now)
    await _reserve(sessions, _claim(site, "local-0", 8000))
    assert await _holds(sessions) == []
    await _check(sessions)
