"""The database ledger: exact reserve and release, all-or-nothing conflicts, quotas, and no
oversubscription under concurrent transactions."""

import asyncio
import dataclasses

import numpy as np
import pytest
import pytest_asyncio
from sqlalchemy import update

from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.claim import Claim, claim_from
from cnbrain.ledger.keys import link_key
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.placement.engine import PlacementEngine
from cnbrain.storage import ledger_store, link_states, registry
from cnbrain.storage.clock import epoch_s, utcnow
from cnbrain.storage.errors import CapacityConflict, LedgerStoreError, QuotaExceeded
from cnbrain.storage.models import SiteCapacity
from cnbrain.storage.requests import NewRequest, insert_requests
from cnbrain.storage.tenants import create_tenant, create_user, get_quota, set_quota
from tests.databases import Sessions
from tests.ledger.snapshots import assert_snapshot_equals, copy_of
from tests.ledger.windows import HOUR
from tests.storage.capacity import leave_cpu_free

pytestmark = pytest.mark.asyncio

TENANT = "acme"


@pytest_asyncio.fixture
async def ledger(sessions: Sessions, seeded: MapArrays) -> MapArrays:
    async with sessions.begin() as session:
        await create_tenant(session, tenant_id=TENANT, name="Acme")
        await create_user(
            session, user_id="alice", name="Alice", role="tenant-user", tenant_id=TENANT
        )
    return seeded


async def _requests(sessions: Sessions, count: int, *, tenant: str = TENANT) -> list[str]:
    ids = [f"req-{tenant}-{i}" for i in range(count)]
    async with sessions.begin() as session:
        await insert_requests(
            session,
            [NewRequest(request_id=i, tenant_id=tenant, user_id="alice", body={}) for i in ids],
        )
    return ids


def _claim(arrays: MapArrays, request_id: str, **changes: object) -> Claim:
    """4 cores, 8 GiB, 2 x A100 on the first site, 200 Mbps on both of its attachment links."""
    site = arrays.map.sites[0]
    links = tuple(link.id for link in arrays.map.links if site.id in (link.a, link.b))
    claim = Claim(
        reservation_id=f"rsv-{request_id}",
        request_id=request_id,
        tenant_id=TENANT,
        site_id=site.id,
        cpu_m=4000,
        mem_mib=8192,
        storage_gib=10,
        accelerator_model="A100",
        accelerator_milli=2000,
        link_ids=links,
        mbps=200,
        window=HOUR,
    )
    return dataclasses.replace(claim, **changes)  # type: ignore[arg-type]


async def _snapshot(sessions: Sessions, arrays: MapArrays) -> Snapshot:
    async with sessions() as session:
        return await ledger_store.load_snapshot(session, arrays=arrays)


async def _check(sessions: Sessions) -> None:
    async with sessions() as session:
        await ledger_store.check_invariants(session)


async def test_reserve_takes_exactly_the_claim_and_release_gives_it_back(
    sessions: Sessions, ledger: MapArrays
) -> None:
    (request_id,) = await _requests(sessions, 1)
    claim = _claim(ledger, request_id)
    before = await _snapshot(sessions, ledger)
    async with sessions.begin() as session:
        await ledger_store.reserve_many(
            session, claims=[dataclasses.replace(claim, reservation_id="rsv-1")]
        )
    during = await _snapshot(sessions, ledger)
    await _check(sessions)
    a100 = ledger.accelerator_column["A100"]
    links = [i for i, link in enumerate(ledger.map.links) if link.id in claim.link_ids]
    assert during.free_cpu_m[0] == before.free_cpu_m[0] - 4000
    assert during.free_mem_mib[0] == before.free_mem_mib[0] - 8192
    assert during.free_storage_gib[0] == before.free_storage_gib[0] - 10
    assert during.free_acc[0, a100] == before.free_acc[0, a100] - 2000
    assert during.free_acc_by_model[a100, 0] == before.free_acc_by_model[a100, 0] - 2000
    assert (during.residual_mbps[links] == before.residual_mbps[links] - 200).all()
    assert np.array_equal(
        np.delete(during.residual_mbps, links), np.delete(before.residual_mbps, links)
    )
    async with sessions() as session:
        quota = await get_quota(session, tenant_id=TENANT)
        assert await ledger_store.held_reservations(session, request_id=request_id) == ["rsv-1"]
    assert quota is not None
    assert (quota.used_cpu_m, quota.used_acc_milli, quota.used_mbps) == (4000, 2000, 200)
    assert quota.active_requests == 1
    async with sessions.begin() as session:
        record = await ledger_store.release(session, reservation_id="rsv-1")
    assert record.state == "released" and record.released_at is not None
    assert_snapshot_equals(await _snapshot(sessions, ledger), copy_of(before))
    await _check(sessions)
    async with sessions() as session:
        quota = await get_quota(session, tenant_id=TENANT)
        assert await ledger_store.held_reservations(session, request_id=request_id) == []
    assert quota is not None and (quota.used_cpu_m, quota.active_requests) == (0, 0)


async def test_release_twice_or_unknown_is_refused(sessions: Sessions, ledger: MapArrays) -> None:
    (request_id,) = await _requests(sessions, 1)
    async with sessions.begin() as session:
        await ledger_store.reserve_many(
            session, claims=[_claim(ledger, request_id, reservation_id="rsv-1")]
        )
    async with sessions.begin() as session:
        await ledger_store.release(session, reservation_id="rsv-1")
    before = await _snapshot(sessions, ledger)
    async with sessions() as session:
        with pytest.raises(LedgerStoreError, match="'rsv-1' is not held"):
            await ledger_store.release(session, reservation_id="rsv-1")
        with pytest.raises(LedgerStoreError, match="'rsv-x' is unknown"):
            await ledger_store.release(session, reservation_id="rsv-x")
    assert_snapshot_equals(await _snapshot(sessions, ledger), copy_of(before))
    await _check(sessions)


@pytest.mark.parametrize(
    ("changes", "resource"),
    [
        ({"cpu_m": 10**12}, "site 'BJ-dc-1' cpu"),
        ({"mem_mib": 10**12}, "site 'BJ-dc-1' memory"),
        ({"accelerator_milli": 33000}, "site 'BJ-dc-1' A100"),
        ({"accelerator_model": "H100"}, "site 'BJ-dc-1' H100"),
        ({"mbps": 10**9}, "bandwidth"),
    ],
)
async def test_a_conflict_names_the_resource_and_leaves_nothing_after_rollback(
    sessions: Sessions, ledger: MapArrays, changes: dict[str, object], resource: str
) -> None:
    (request_id,) = await _requests(sessions, 1)
    before = await _snapshot(sessions, ledger)
    async with sessions() as session:
        with pytest.raises(CapacityConflict, match=resource) as raised:
            await ledger_store.reserve_many(
                session, claims=[_claim(ledger, request_id, **changes, reservation_id="rsv-1")]
            )
        await session.rollback()
    assert resource in raised.value.resource
    assert_snapshot_equals(await _snapshot(sessions, ledger), copy_of(before))
    await _check(sessions)


async def test_external_use_and_retired_sites_count_against_room(
    sessions: Sessions, ledger: MapArrays
) -> None:
    first, second = await _requests(sessions, 2)
    site = ledger.map.sites[0]
    link = _claim(ledger, first).link_ids[0]
    async with sessions.begin() as session:
        index = [x.id for x in ledger.map.links].index(link)
        cap = int(ledger.link_cap_mbps[index])
        await registry.report_link_usage(session, link_id=link, mbps=cap - 100)
    async with sessions() as session:
        with pytest.raises(CapacityConflict, match=f"link '{link}' bandwidth: wants 200, 100 free"):
            await ledger_store.reserve_many(
                session, claims=[_claim(ledger, first, reservation_id="r1")]
            )
    async with sessions.begin() as session:
        await ledger_store.reserve_many(
            session, claims=[_claim(ledger, first, mbps=100, reservation_id="r1")]
        )
    async with sessions.begin() as session:
        await ledger_store.release(session, reservation_id="r1")
        await registry.retire_site(session, site_id=site.id)
    async with sessions() as session:
        with pytest.raises(CapacityConflict, match=f"site '{site.id}': not registered, or retired"):
            await ledger_store.reserve_many(
                session, claims=[_claim(ledger, second, reservation_id="r2")]
            )
        snapshot = await ledger_store.load_snapshot(session, arrays=ledger)
    assert snapshot.free_cpu_m[0] == 0 and not snapshot.free_acc[0].any()
    await _check(sessions)


async def test_a_link_reported_down_offers_nothing_until_reported_up(
    sessions: Sessions, ledger: MapArrays
) -> None:
    first, second = await _requests(sessions, 2)
    link = _claim(ledger, first).link_ids[0]
    index = [x.id for x in ledger.map.links].index(link)
    now = epoch_s(utcnow())

    async def report(state: str) -> None:
        async with sessions.begin() as session:
            await link_states.report(session, link_id=link, state=state, reason="", actor="u-1")

    async def offered() -> tuple[int, int]:
        """The link's free bandwidth in the snapshot, and its capacity on the calendar."""
        async with sessions() as session:
            snapshot = await ledger_store.load_snapshot(session, arrays=ledger)
            calendar, _ = await ledger_store.calendar_and_holdings(session, arrays=ledger, now=now)
        return int(snapshot.residual_mbps[index]), calendar.profile(link_key(index)).capacity

    cap = int(ledger.link_cap_mbps[index])
    assert await offered() == (cap, cap)
    await report(link_states.DOWN)
    assert await offered() == (0, 0)
    async with sessions() as session:
        with pytest.raises(CapacityConflict, match=f"link '{link}': reported down"):
            await ledger_store.reserve_many(
                session, claims=[_claim(ledger, first, reservation_id="r1")]
            )
    await report(link_states.UP)
    assert await offered() == (cap, cap)
    async with sessions.begin() as session:
        await ledger_store.reserve_many(
            session, claims=[_claim(ledger, second, reservation_id="r2")]
        )
    await _check(sessions)


async def test_quota_limits_are_enforced_and_named(sessions: Sessions, ledger: MapArrays) -> None:
    ids = await _requests(sessions, 4)
    async with sessions.begin() as session:
        await set_quota(session, tenant_id=TENANT, limit_cpu_m=10_000, limit_active_requests=3)
    for i in (0, 1):
        async with sessions.begin() as session:
            await ledger_store.reserve_many(
                session, claims=[_claim(ledger, ids[i], reservation_id=f"r{i}")]
            )
    before = await _snapshot(sessions, ledger)
    async with sessions() as session:
        with pytest.raises(QuotaExceeded, match="tenant 'acme' cpu: wants 4000, 2000 left"):
            await ledger_store.reserve_many(
                session, claims=[_claim(ledger, ids[2], reservation_id="r2")]
            )
        await session.rollback()
    assert_snapshot_equals(await _snapshot(sessions, ledger), copy_of(before))
    async with sessions.begin() as session:
        await ledger_store.reserve_many(
            session, claims=[_claim(ledger, ids[2], cpu_m=2000, reservation_id="r2")]
        )
    async with sessions() as session:
        with pytest.raises(QuotaExceeded, match="active requests") as raised:
            await ledger_store.reserve_many(
                session, claims=[_claim(ledger, ids[3], cpu_m=0, reservation_id="r3")]
            )
    assert raised.value.resource == "tenant 'acme' active requests"
    await _check(sessions)


async def test_claims_are_checked(sessions: Sessions, ledger: MapArrays) -> None:
    (request_id,) = await _requests(sessions, 1)
    claim = _claim(ledger, request_id)
    async with sessions() as session:
        with pytest.raises(LedgerStoreError, match="cpu_m is negative"):
            await ledger_store.reserve_many(
                session, claims=[dataclasses.replace(claim, cpu_m=-1, reservation_id="r")]
            )
        with pytest.raises(LedgerStoreError, match="more than once"):
            await ledger_store.reserve_many(
                session,
                claims=[
                    dataclasses.replace(claim, link_ids=claim.link_ids * 2, reservation_id="r")
                ],
            )


async def test_engine_reservations_convert_to_claims(sessions: Sessions, ledger: MapArrays) -> None:
    request = PlacementRequest.model_validate(
        {
            "id": "req-engine",
            "tenant": TENANT,
            "source_province": "BJ",
            "resources": {
                "cpu": 8.0,
                "memory_gib": 32.0,
                "accelerator": {"model": "A100", "count": 4},
            },
            "constraints": {"min_bandwidth_gbps": 0.5},
            "duration_hours": 1.0,
        }
    )
    engine = PlacementEngine(ledger.map)
    engine_arrays = engine.arrays
    async with sessions() as session:
        snapshot = await ledger_store.load_snapshot(session, arrays=engine_arrays)
    decision = engine.place(request, reserve=False, snapshot=snapshot)
    assert decision.site is not None
    reservation = engine.reservation_for(request, decision)
    claim = claim_from(reservation, arrays=engine_arrays, tenant_id=TENANT, window=HOUR)
    assert claim.site_id == decision.site
    assert (claim.cpu_m, claim.mem_mib, claim.accelerator_model, claim.accelerator_milli) == (
        8000,
        32 * 1024,
        "A100",
        4000,
    )
    assert claim.mbps == 500 and claim.link_ids
    assert decision.path is not None
    hops = [hop.link for segment in decision.path.segments for hop in segment.hops]
    assert set(claim.link_ids) == set(hops)
    async with sessions.begin() as session:
        await insert_requests(
            session, [NewRequest(request_id=request.id, tenant_id=TENANT, user_id="alice", body={})]
        )
        await ledger_store.reserve_many(session, claims=[claim])
    await _check(sessions)


async def test_check_invariants_notices_drift(sessions: Sessions, ledger: MapArrays) -> None:
    (request_id,) = await _requests(sessions, 1)
    async with sessions.begin() as session:
        await ledger_store.reserve_many(
            session, claims=[_claim(ledger, request_id, reservation_id="r")]
        )
    await _check(sessions)
    async with sessions.begin() as session:
        await session.execute(
            update(SiteCapacity)
            .where(SiteCapacity.site_id == ledger.map.sites[0].id)
            .values(cpu_m_used=SiteCapacity.cpu_m_used + 1)
        )
    with pytest.raises(AssertionError, match="cpu: used 4001 but held reservations sum to 4000"):
        await _check(sessions)


async def test_concurrent_transactions_never_oversubscribe(
    sessions: Sessions, ledger: MapArrays
) -> None:
    """40 concurrent sessions of one process race for room for 25 (on SQLite too)."""
    ids = await _requests(sessions, 40)
    site = ledger.map.sites[0]
    fits, claim_cpu = 25, 1000
    async with sessions.begin() as session:
        await leave_cpu_free(session, site.id, fits * claim_cpu)

    async def attempt(request_id: str) -> bool:
        claim = _claim(
            ledger, request_id, cpu_m=claim_cpu, accelerator_milli=0, accelerator_model=None
        )
        try:
            async with sessions.begin() as session:
                await ledger_store.reserve_many(session, claims=[claim])
        except CapacityConflict:
            return False
        return True

    results = await asyncio.gather(*(attempt(request_id) for request_id in ids))
    assert sum(results) == fits
    await _check(sessions)
