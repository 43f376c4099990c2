"""Many requests at once: pending inserts with idempotency keys, state changes, decisions and
audit entries in one statement each; `reserve_many` takes the sums of many claims all or
nothing, and never oversubscribes or deadlocks next to other batches."""

import asyncio
import dataclasses
import json
import random
from datetime import UTC

import numpy as np
import pytest
import pytest_asyncio
from sqlalchemy import delete, event

from cnbrain.ledger.claim import Claim
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import audit, ledger_store, registry, requests
from cnbrain.storage.database import Dialect
from cnbrain.storage.errors import (
    CapacityConflict,
    InvalidTransition,
    LedgerStoreError,
    NotFoundError,
    QuotaExceeded,
    RequestStoreError,
)
from cnbrain.storage.models import Quota
from cnbrain.storage.requests import NewRequest, StateChange
from cnbrain.storage.tenants import create_tenant, create_user, get_quota, set_quota
from tests.databases import Sessions
from tests.ledger.windows import HOUR
from tests.storage.capacity import leave_cpu_free

pytestmark = pytest.mark.asyncio

TENANT = "acme"


@pytest_asyncio.fixture
async def ledger(sessions: Sessions, seeded: MapArrays) -> MapArrays:
    async with sessions.begin() as session:
        for tenant in (TENANT, "umbrella"):
            await create_tenant(session, tenant_id=tenant, name=tenant)
            await create_user(
                session, user_id=f"{tenant}-u", name="u", role="tenant-user", tenant_id=tenant
            )
    return seeded


def _new(request_id: str, tenant: str = TENANT, key: str | None = None) -> NewRequest:
    return NewRequest(
        request_id=request_id,
        tenant_id=tenant,
        user_id=f"{tenant}-u",
        body={"id": request_id},
        idempotency_key=key,
    )


async def _pending(sessions: Sessions, ids: list[str], tenant: str = TENANT) -> None:
    async with sessions.begin() as session:
        assert await requests.insert_requests(session, [_new(i, tenant) for i in ids]) == [
            None
        ] * len(ids)


async def _snapshot(sessions: Sessions, arrays: MapArrays) -> Snapshot:
    async with sessions() as session:
        return await ledger_store.load_snapshot(session, arrays=arrays)


async def _check(sessions: Sessions) -> None:
    async with sessions() as session:
        await ledger_store.check_invariants(session)


def _claim(arrays: MapArrays, request_id: str, site: int = 0, **changes: object) -> Claim:
    """2 cores, 4 GiB, 1 x T4 on site `site`, 100 Mbps on one of its attachment links."""
    site_id = arrays.map.sites[site].id
    link = next(link.id for link in arrays.map.links if site_id in (link.a, link.b))
    claim = Claim(
        reservation_id=f"rsv-{request_id}",
        request_id=request_id,
        tenant_id=TENANT,
        site_id=site_id,
        cpu_m=2000,
        mem_mib=4096,
        storage_gib=5,
        accelerator_model="T4",
        accelerator_milli=1000,
        link_ids=(link,),
        mbps=100,
        window=HOUR,
    )
    return dataclasses.replace(claim, **changes)  # type: ignore[arg-type]


async def test_insert_requests_answers_duplicates_with_the_first_request(
    sessions: Sessions, ledger: MapArrays
) -> None:
    async with sessions.begin() as session:
        await requests.insert_requests(session, [_new("r0", key="k0")])
    async with sessions.begin() as session:
        answers = await requests.insert_requests(
            session,
            [
                _new("r1", key="k1"),
                _new("r2", key="k0"),  # used by an earlier batch
                _new("r3", key="k1"),  # used earlier in this batch
                _new("r4", tenant="umbrella", key="k1"),  # keys are per tenant
                _new("r5"),
                _new("r6"),  # no key: never a duplicate
            ],
        )
    assert answers == [None, "r0", "r1", None, None, None]
    async with sessions() as session:
        stored, _ = await requests.list_requests(session, tenant_id=None)
    assert sorted(r.id for r in stored) == ["r0", "r1", "r4", "r5", "r6"]
    assert {r.state for r in stored} == {"pending"}
    assert all(r.created_at == r.updated_at for r in stored)


async def test_insert_requests_stores_nothing_when_one_is_bad(
    sessions: Sessions, ledger: MapArrays
) -> None:
    async with sessions() as session:
        with pytest.raises(RequestStoreError, match="cannot be stored"):
            await requests.insert_requests(session, [_new("r1"), _new("r2", tenant="nobody")])
        await session.rollback()
    with pytest.raises(ValueError, match="more than once"):
        async with sessions() as session:
            await requests.insert_requests(session, [_new("r1"), _new("r1")])
    async with sessions() as session:
        assert (await requests.list_requests(session, tenant_id=None))[0] == []


async def test_set_states_saves_decisions_and_audits_in_one_statement_each(
    sessions: Sessions, ledger: MapArrays
) -> None:
    await _pending(sessions, ["r1", "r2", "r3"])
    async with sessions.begin() as session:
        at = await requests.set_states(
            session,
            [
                StateChange("r1", "placed", site_id="BJ-dc-1"),
                StateChange("r2", "rejected", reason="no room"),
                StateChange("r3", "placed", site_id="SH-dc-1"),
            ],
        )
        await requests.save_decisions(session, {"r1": {"site": "BJ-dc-1"}, "r2": {"site": None}})
        await requests.save_decisions(session, {"r2": {"site": None, "again": True}})
        await audit.record_many(
            session,
            [
                audit.Entry(
                    actor="acme-u",
                    action=f"request.{state}",
                    object_type="request",
                    object_id=request_id,
                    tenant_id=TENANT,
                )
                for request_id, state in (("r1", "placed"), ("r2", "rejected"))
            ],
        )
    async with sessions() as session:
        one = await requests.get_request_and_decision(session, tenant_id=TENANT, request_id="r1")
        two = await requests.get_request_and_decision(session, tenant_id=None, request_id="r2")
        three = await requests.get_request_and_decision(session, tenant_id=TENANT, request_id="r3")
        hidden = await requests.get_request_and_decision(
            session, tenant_id="umbrella", request_id="r1"
        )
        decisions = await requests.get_decisions(session, request_ids=["r1", "r2", "r3", "rx"])
        entries, _ = await audit.list_entries(session, tenant_id=TENANT)
    assert one is not None and two is not None and three is not None and hidden is None
    assert (one[0].state, one[0].site_id, one[0].reason, one[1]) == (
        "placed",
        "BJ-dc-1",
        None,
        {"site": "BJ-dc-1"},
    )
    assert (two[0].state, two[0].site_id, two[0].reason) == ("rejected", None, "no room")
    assert (three[0].site_id, three[1]) == ("SH-dc-1", None)
    stored_at = one[0].updated_at  # SQLite hands times back naive (in UTC)
    assert (stored_at if stored_at.tzinfo else stored_at.replace(tzinfo=UTC)) == at
    assert decisions == {"r1": {"site": "BJ-dc-1"}, "r2": {"site": None, "again": True}}
    assert [e.object_id for e in entries] == ["r2", "r1"]  # newest first


async def test_set_states_refuses_a_transition_or_an_unknown_request(
    sessions: Sessions, ledger: MapArrays
) -> None:
    await _pending(sessions, ["r1", "r2"])
    async with sessions.begin() as session:
        await requests.set_states(session, [StateChange("r1", "rejected", reason="no")])
    async with sessions() as session:
        with pytest.raises(InvalidTransition, match="'r1': cannot go from 'rejected' to 'placed'"):
            await requests.set_states(
                session, [StateChange("r2", "placed"), StateChange("r1", "placed")]
            )
        await session.rollback()
        with pytest.raises(NotFoundError, match="'rx'"):
            await requests.set_states(session, [StateChange("rx", "placed")])
        await session.rollback()
    async with sessions() as session:
        record = await requests.get_request(session, tenant_id=None, request_id="r2")
    assert record is not None and record.state == "pending"


async def test_reserve_many_takes_the_sums_and_each_releases_its_own(
    sessions: Sessions, ledger: MapArrays
) -> None:
    ids = [f"r{i}" for i in range(5)]
    await _pending(sessions, ids)
    claims = [
        _claim(ledger, "r0", reservation_id="a0"),
        _claim(ledger, "r1", reservation_id="a1"),  # the same site, pool and link as r0
        _claim(
            ledger, "r2", site=1, accelerator_model=None, accelerator_milli=0, reservation_id="a2"
        ),
        _claim(ledger, "r3", site=1, mbps=0, reservation_id="a3"),
        _claim(ledger, "r4", site=2, link_ids=(), mbps=0, reservation_id="a4"),
    ]
    before = await _snapshot(sessions, ledger)
    async with sessions.begin() as session:
        await ledger_store.reserve_many(session, claims=claims)
    after = await _snapshot(sessions, ledger)
    await _check(sessions)
    t4 = ledger.accelerator_column["T4"]
    assert list(before.free_cpu_m[:3] - after.free_cpu_m[:3]) == [4000, 4000, 2000]
    assert list(before.free_mem_mib[:3] - after.free_mem_mib[:3]) == [8192, 8192, 4096]
    assert list(before.free_acc[:3, t4] - after.free_acc[:3, t4]) == [2000, 1000, 1000]
    assert int((before.residual_mbps - after.residual_mbps).sum()) == 300
    async with sessions() as session:
        quota = await get_quota(session, tenant_id=TENANT)
        held = await ledger_store.held_reservations(session, tenant_id=TENANT)
        links = await ledger_store.reservation_links(session, reservation_id="a3")
    assert quota is not None and (quota.used_cpu_m, quota.active_requests) == (10_000, 5)
    assert quota.used_acc_milli == 4000 and quota.used_mbps == 300
    assert sorted(held) == ["a0", "a1", "a2", "a3", "a4"]
    assert links == list(claims[3].link_ids)
    for claim in claims:
        async with sessions.begin() as session:
            await ledger_store.release(session, reservation_id=claim.reservation_id)
        await _check(sessions)
    released = await _snapshot(sessions, ledger)
    assert all(
        np.array_equal(getattr(released, name), getattr(before, name))
        for name in ("free_cpu_m", "free_mem_mib", "free_storage_gib", "free_acc", "residual_mbps")
    )


async def test_claims_that_fit_alone_but_not_together_take_nothing(
    sessions: Sessions, ledger: MapArrays
) -> None:
    ids = [f"r{i}" for i in range(3)]
    await _pending(sessions, ids)
    site = ledger.map.sites[0]
    async with sessions.begin() as session:
        await leave_cpu_free(session, site.id, 5000)  # room for two claims of 2 cores
    before = await _snapshot(sessions, ledger)
    async with sessions() as session:
        with pytest.raises(CapacityConflict, match=f"site '{site.id}' cpu: wants 6000, 5000 free"):
            await ledger_store.reserve_many(
                session, claims=[_claim(ledger, i, reservation_id=f"a{i}") for i in ids]
            )
        await session.rollback()
    assert np.array_equal((await _snapshot(sessions, ledger)).free_cpu_m, before.free_cpu_m)
    async with sessions.begin() as session:
        await ledger_store.reserve_many(
            session, claims=[_claim(ledger, i, reservation_id=f"a{i}") for i in ids[:2]]
        )
    await _check(sessions)


async def test_a_batch_over_the_quota_takes_nothing(sessions: Sessions, ledger: MapArrays) -> None:
    ids = [f"r{i}" for i in range(4)]
    await _pending(sessions, ids)
    async with sessions.begin() as session:
        await set_quota(session, tenant_id=TENANT, limit_accelerators=3, limit_active_requests=10)
    claims = [
        _claim(ledger, request_id, site=i, reservation_id=f"a{i}")
        for i, request_id in enumerate(ids)
    ]
    before = await _snapshot(sessions, ledger)
    async with sessions() as session:
        with pytest.raises(
            QuotaExceeded, match="tenant 'acme' accelerators: wants 4000, 3000 left"
        ):
            await ledger_store.reserve_many(session, claims=claims)
        await session.rollback()
    assert np.array_equal((await _snapshot(sessions, ledger)).free_acc, before.free_acc)
    async with sessions.begin() as session:
        await ledger_store.reserve_many(session, claims=claims[:3])
    async with sessions() as session:
        quota = await get_quota(session, tenant_id=TENANT)
    assert quota is not None and (quota.used_acc_milli, quota.active_requests) == (3000, 3)
    await _check(sessions)


async def _statements_of_reserve_many(sessions: Sessions, claims: list[Claim]) -> int:
    """The SQL statements `reserve_many` of `claims` runs, other than the start of its
    transaction."""
    seen: list[str] = []

    def count(_connection: object, _cursor: object, statement: str, *_: object) -> None:
        if not statement.startswith("BEGIN"):
            seen.append(statement)

    engine = sessions.kw["bind"].sync_engine
    async with sessions.begin() as session:
        event.listen(engine, "before_cursor_execute", count)
        try:
            await ledger_store.reserve_many(session, claims=claims)
        finally:
            event.remove(engine, "before_cursor_execute", count)
    return len(seen)


async def test_reserve_many_costs_the_same_statements_for_one_claim_and_for_many(
    sessions: Sessions, ledger: MapArrays
) -> None:
    """A single claim is a batch of one; on PostgreSQL a batch is six locking reads (the
    sites' with their node pools), one read of the room holds on its sites and (on these
    sites, which have pools) one of their node takes, one statement for the updates and
    inserts and one insert of the new node takes."""
    ids = [f"r{i}" for i in range(6)]
    await _pending(sessions, ids)
    one = await _statements_of_reserve_many(sessions, [_claim(ledger, ids[0])])
    many = await _statements_of_reserve_many(
        sessions, [_claim(ledger, i, site=n % 3) for n, i in enumerate(ids[1:])]
    )
    assert one == many
    if Dialect(sessions.kw["bind"].dialect.name) is Dialect.POSTGRESQL:
        assert one == 10
    await _check(sessions)


async def test_reserve_many_refuses_bad_batches(sessions: Sessions, ledger: MapArrays) -> None:
    ids = [f"r{i}" for i in range(3)]
    await _pending(sessions, ids)
    async with sessions.begin() as session:
        await ledger_store.reserve_many(session, claims=[_claim(ledger, "r0", reservation_id="a0")])
        await registry.retire_site(session, site_id=ledger.map.sites[3].id)
    before = await _snapshot(sessions, ledger)
    retired = ledger.map.sites[3].id
    cases: list[tuple[list[Claim], type[Exception], str]] = [
        (
            [_claim(ledger, "r1", reservation_id="a1"), _claim(ledger, "r2", reservation_id="a1")],
            LedgerStoreError,
            "more than once",
        ),
        ([_claim(ledger, "r1", reservation_id="a0")], LedgerStoreError, "cannot be stored"),
        ([_claim(ledger, "rx", reservation_id="a1")], LedgerStoreError, "cannot be stored"),
        ([_claim(ledger, "r1", cpu_m=-1, reservation_id="a1")], LedgerStoreError, "negative"),
        (
            [
                _claim(ledger, "r1", reservation_id="a1"),
                _claim(ledger, "r2", site=3, reservation_id="a2"),
            ],
            CapacityConflict,
            f"site '{retired}': not registered, or retired",
        ),
        (
            [_claim(ledger, "r1", accelerator_model="H100", reservation_id="a1")],
            CapacityConflict,
            "H100: wants 1000, 0 free",
        ),
        ([_claim(ledger, "r1", mbps=10**9, reservation_id="a1")], CapacityConflict, "bandwidth"),
        (
            [_claim(ledger, "r1", tenant_id="umbrella", reservation_id="a1")],
            LedgerStoreError,
            "no quota",
        ),
    ]
    async with sessions.begin() as session:
        await session.execute(delete(Quota).where(Quota.tenant_id == "umbrella"))
    for claims, error, message in cases:
        async with sessions() as session:
            with pytest.raises(error, match=message):
                await ledger_store.reserve_many(session, claims=claims)
            await session.rollback()
    after = await _snapshot(sessions, ledger)
    assert all(
        np.array_equal(getattr(after, name), getattr(before, name))
        for name in ("free_cpu_m", "free_acc", "residual_mbps")
    )
    await _check(sessions)


async def test_concurrent_batches_and_single_claims_never_oversubscribe(
    sessions: Sessions, ledger: MapArrays
) -> None:
    """Batches over shared sites and links, in every order, race batches of one claim: exactly
    the room is taken, and nothing deadlocks (on SQLite the transactions take turns)."""
    sites = [0, 1, 2]
    room = 12  # claims of 2 cores per site
    for site in sites:
        async with sessions.begin() as session:
            await leave_cpu_free(session, ledger.map.sites[site].id, room * 2000)
    rng = random.Random(5)
    work: list[list[Claim]] = []
    n = 0
    for size in [1, 3, 5, 2, 1, 4, 6, 1, 3, 2] * 3:
        batch = []
        for _ in range(size):
            site = rng.choice(sites)
            batch.append(
                _claim(ledger, f"r{n}", site=site, accelerator_model=None, accelerator_milli=0)
            )
            n += 1
        work.append(batch)
    await _pending(sessions, [f"r{i}" for i in range(n)])

    async def attempt(batch: list[Claim]) -> int:
        try:
            async with sessions.begin() as session:
                await ledger_store.reserve_many(session, claims=batch)
        except CapacityConflict:
            return 0
        return len(batch)

    taken = sum(await asyncio.gather(*(attempt(batch) for batch in work)))
    assert 0 < taken <= room * len(sites)
    await _check(sessions)
    after = await _snapshot(sessions, ledger)
    assert all(after.free_cpu_m[site] >= 0 for site in sites)
    assert sum(room * 2000 - int(after.free_cpu_m[site]) for site in sites) == taken * 2000


async def test_documents_already_encoded_are_stored_as_they_are(
    sessions: Sessions, ledger: MapArrays
) -> None:
    body = {"id": "r1", "resources": {"cpu": 2.5}, "name": "数据"}
    new = dataclasses.replace(_new("r1"), body=requests.JsonText(json.dumps(body)))
    async with sessions.begin() as session:
        assert await requests.insert_requests(session, [new]) == [None]
        await requests.save_decisions(session, {"r1": requests.JsonText('{"site": "BJ-dc-1"}')})
    async with sessions() as session:
        found = await requests.get_request_and_decision(session, tenant_id=TENANT, request_id="r1")
    assert found is not None
    assert found[0].body == body and found[1] == {"site": "BJ-dc-1"}
