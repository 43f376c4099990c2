"""The peer ledger on PostgreSQL and SQLite: prepare, commit, release and expiry of the parts
of cross-brain reservations, all idempotent and exact."""

from datetime import timedelta

import pytest
import pytest_asyncio
from sqlalchemy import event

from cnbrain.domain.states import ReservationState
from cnbrain.ledger.claim import Claim
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import ledger_store, peer_ledger
from cnbrain.storage.clock import utcnow
from cnbrain.storage.errors import CapacityConflict, LedgerStoreError, QuotaExceeded
from cnbrain.storage.models import Quota
from cnbrain.storage.tenants import create_tenant, set_quota
from tests.databases import Sessions
from tests.ledger.windows import HOUR

pytestmark = pytest.mark.asyncio

TENANT = "acme"
LATER = timedelta(minutes=5)


@pytest_asyncio.fixture
async def ledger(sessions: Sessions, seeded: MapArrays) -> MapArrays:
    async with sessions.begin() as session:
        await create_tenant(session, tenant_id=TENANT, name="Acme")
    return seeded


def _part(arrays: MapArrays, reservation_id: str, **changes: object) -> Claim:
    """4 cores, 2 x A100 on the first site and 200 Mbps on its links; no quota."""
    site = arrays.map.sites[0]
    links = tuple(sorted(link.id for link in arrays.map.links if site.id in (link.a, link.b)))
    values: dict[str, object] = {
        "reservation_id": reservation_id,
        "request_id": f"req-{reservation_id}",
        "tenant_id": TENANT,
        "site_id": site.id,
        "cpu_m": 4000,
        "mem_mib": 8192,
        "storage_gib": 10,
        "accelerator_model": "A100",
        "accelerator_milli": 2000,
        "link_ids": links,
        "mbps": 200,
        "window": HOUR,
        "counts_quota": False,
    }
    values.update(changes)
    return Claim(**values)  # type: ignore[arg-type]


async def _snapshot(sessions: Sessions, arrays: MapArrays) -> Snapshot:
    async with sessions() as session:
        return await ledger_store.load_snapshot(session, arrays=arrays)


async def _prepare(sessions: Sessions, part: Claim, expires_in: timedelta = LATER) -> bool:
    async with sessions.begin() as session:
        return await peer_ledger.prepare(session, claim=part, expires_at=utcnow() + expires_in)


async def test_prepare_takes_the_part_once_and_release_gives_it_back_once(
    sessions: Sessions, ledger: MapArrays
) -> None:
    before = await _snapshot(sessions, ledger)
    part = _part(ledger, "rsv-1")

    assert await _prepare(sessions, part) is True
    assert await _prepare(sessions, part) is False
    taken = await _snapshot(sessions, ledger)
    link = ledger.map.links.index(next(lk for lk in ledger.map.links if lk.id == part.link_ids[0]))
    assert taken.free_cpu_m[0] == before.free_cpu_m[0] - 4000
    assert taken.free_acc[0, ledger.accelerator_column["A100"]] == (
        before.free_acc[0, ledger.accelerator_column["A100"]] - 2000
    )
    assert taken.residual_mbps[link] == before.residual_mbps[link] - 200
    async with sessions() as session:
        await ledger_store.check_invariants(session)

    async with sessions.begin() as session:
        assert await peer_ledger.release(session, reservation_id="rsv-1") is True
    async with sessions.begin() as session:
        assert await peer_ledger.release(session, reservation_id="rsv-1") is False
    after = await _snapshot(sessions, ledger)
    assert (after.free_cpu_m == before.free_cpu_m).all()
    assert (after.residual_mbps == before.residual_mbps).all()
    assert (after.free_acc == before.free_acc).all()


async def test_a_repeated_prepare_with_other_amounts_or_after_release_is_refused(
    sessions: Sessions, ledger: MapArrays
) -> None:
    await _prepare(sessions, _part(ledger, "rsv-2"))

    with pytest.raises(LedgerStoreError, match="other amounts"):
        await _prepare(sessions, _part(ledger, "rsv-2", cpu_m=8000))
    async with sessions.begin() as session:
        await peer_ledger.release(session, reservation_id="rsv-2")
    with pytest.raises(LedgerStoreError, match="released already"):
        await _prepare(sessions, _part(ledger, "rsv-2"))


async def test_prepare_refuses_what_does_not_fit_and_takes_nothing(
    sessions: Sessions, ledger: MapArrays
) -> None:
    before = await _snapshot(sessions, ledger)
    too_many = int(before.free_acc[0, ledger.accelerator_column["A100"]]) + 1

    with pytest.raises(CapacityConflict, match="A100"):
        await _prepare(sessions, _part(ledger, "rsv-3", accelerator_milli=too_many))

    after = await _snapshot(sessions, ledger)
    assert (after.free_cpu_m == before.free_cpu_m).all()
    assert (after.residual_mbps == before.residual_mbps).all()
    async with sessions() as session:
        assert await peer_ledger.get(session, reservation_id="rsv-3") is None


async def test_a_network_only_part_counting_the_quota_is_held_to_the_quota(
    sessions: Sessions, ledger: MapArrays
) -> None:
    async with sessions.begin() as session:
        await set_quota(session, tenant_id=TENANT, limit_accelerators=3)
    source = _part(ledger, "rsv-4", site_id=None, counts_quota=True)
    before = await _snapshot(sessions, ledger)

    await _prepare(sessions, source)
    with pytest.raises(QuotaExceeded, match="accelerators"):
        await _prepare(sessions, _part(ledger, "rsv-5", site_id=None, counts_quota=True))

    after = await _snapshot(sessions, ledger)
    assert (after.free_cpu_m == before.free_cpu_m).all(), "a network-only part takes no compute"
    async with sessions() as session:
        await ledger_store.check_invariants(session)
    async with sessions.begin() as session:
        await peer_ledger.release(session, reservation_id="rsv-4")
    await _prepare(sessions, _part(ledger, "rsv-5", site_id=None, counts_quota=True))


async def test_commit_holds_a_prepared_part_and_records_the_decision(
    sessions: Sessions, ledger: MapArrays
) -> None:
    await _prepare(sessions, _part(ledger, "rsv-6"))

    for _ in range(2):
        async with sessions.begin() as session:
            reason = await peer_ledger.commit(
                session, reservation_id="rsv-6", decision={"site": "x"}, request={"id": "r"}
            )
        assert reason is None
    async with sessions.begin() as session:
        assert await peer_ledger.expire(session, now=utcnow() + 2 * LATER) == []
        record = await peer_ledger.get(session, reservation_id="rsv-6")
    assert record is not None and record.state == "held" and record.decision == {"site": "x"}


async def test_an_expired_part_is_released_by_expire_and_cannot_be_committed(
    sessions: Sessions, ledger: MapArrays
) -> None:
    before = await _snapshot(sessions, ledger)
    await _prepare(sessions, _part(ledger, "rsv-7"), expires_in=timedelta(seconds=1))
    later = utcnow() + timedelta(seconds=5)

    async with sessions.begin() as session:
        reason = await peer_ledger.commit(
            session, reservation_id="rsv-7", decision=None, request=None, now=later
        )
    assert reason is not None and "expired" in reason
    async with sessions.begin() as session:
        assert await peer_ledger.expire(session, now=later) == ["rsv-7"]
    async with sessions.begin() as session:
        reason = await peer_ledger.commit(
            session, reservation_id="rsv-7", decision=None, request=None
        )
    assert reason is not None and "released" in reason
    after = await _snapshot(sessions, ledger)
    assert (after.free_cpu_m == before.free_cpu_m).all()
    assert (after.residual_mbps == before.residual_mbps).all()


async def test_commit_of_an_unknown_part_says_so(sessions: Sessions, ledger: MapArrays) -> None:
    async with sessions.begin() as session:
        reason = await peer_ledger.commit(
            session, reservation_id="rsv-none", decision=None, request=None
        )
    assert reason is not None and "never prepared" in reason


async def test_prepare_many_takes_each_part_on_its_own_in_one_transaction(
    sessions: Sessions, ledger: MapArrays
) -> None:
    before = await _snapshot(sessions, ledger)
    assert await _prepare(sessions, _part(ledger, "rsv-old", cpu_m=1000)) is True
    async with sessions.begin() as session:
        assert await peer_ledger.release(session, reservation_id="rsv-old") is True
    parts = [
        _part(ledger, "rsv-a"),
        _part(ledger, "rsv-b", accelerator_milli=10_000_000),
        _part(ledger, "rsv-c", cpu_m=2000),
        _part(ledger, "rsv-a"),
        _part(ledger, "rsv-a", cpu_m=1),
        _part(ledger, "rsv-old", cpu_m=1000),
    ]

    async with sessions.begin() as session:
        results = await peer_ledger.prepare_many(session, claims=parts, expires_at=utcnow() + LATER)

    assert results[0] is True and results[2] is True and results[3] is False
    assert isinstance(results[1], str) and "A100" in results[1]
    assert isinstance(results[4], str) and "other amounts" in results[4]
    assert isinstance(results[5], str) and "released already" in results[5]
    taken = await _snapshot(sessions, ledger)
    assert taken.free_cpu_m[0] == before.free_cpu_m[0] - 4000 - 2000
    column = ledger.accelerator_column["A100"]
    assert taken.free_acc[0, column] == before.free_acc[0, column] - 2000 - 2000
    async with sessions() as session:
        await ledger_store.check_invariants(session)
        states = {p.id: p.state for p in await peer_ledger.active_parts(session)}
        assert await peer_ledger.get(session, reservation_id="rsv-b") is None
    assert states == {"rsv-a": ReservationState.PREPARED, "rsv-c": ReservationState.PREPARED}

    async with sessions.begin() as session:
        again = await peer_ledger.prepare_many(
            session, claims=parts[:3], expires_at=utcnow() + LATER
        )
    assert again[0] is False and again[2] is False and isinstance(again[1], str)
    async with sessions.begin() as session:
        assert await peer_ledger.release_many(
            session, reservation_ids=["rsv-a", "rsv-b", "rsv-c", "rsv-c"]
        ) == [True, False, True, False]
    after = await _snapshot(sessions, ledger)
    assert (after.free_cpu_m == before.free_cpu_m).all()
    assert (after.free_acc == before.free_acc).all()
    assert (after.residual_mbps == before.residual_mbps).all()


async def test_prepare_many_takes_parts_that_fit_together_and_sums_them_against_the_quota(
    sessions: Sessions, ledger: MapArrays
) -> None:
    async with sessions.begin() as session:
        await set_quota(session, tenant_id=TENANT, limit_accelerators=4)
    before = await _snapshot(sessions, ledger)
    compute = _part(ledger, "rsv-d")
    network = [
        _part(ledger, f"rsv-n{i}", site_id=None, cpu_m=0, counts_quota=True) for i in range(3)
    ]

    async with sessions.begin() as session:
        taken = await peer_ledger.prepare_many(
            session, claims=[compute, *network[:2]], expires_at=utcnow() + LATER
        )
    async with sessions.begin() as session:
        over = await peer_ledger.prepare_many(
            session, claims=network[2:], expires_at=utcnow() + LATER
        )

    assert taken == [True, True, True]
    assert isinstance(over[0], str) and "accelerators" in over[0]
    after = await _snapshot(sessions, ledger)
    assert after.free_cpu_m[0] == before.free_cpu_m[0] - 4000
    link = ledger.map.links.index(
        next(lk for lk in ledger.map.links if lk.id == compute.link_ids[0])
    )
    assert after.residual_mbps[link] == before.residual_mbps[link] - 3 * 200
    async with sessions() as session:
        await ledger_store.check_invariants(session)
        assert {p.id for p in await peer_ledger.active_parts(session)} == {
            "rsv-d",
            "rsv-n0",
            "rsv-n1",
        }


class _Statements:
    """Counts the SQL statements the engine behind `sessions` runs while active, other than
    the start of a transaction."""

    def __init__(self, sessions: Sessions) -> None:
        bind = sessions.kw["bind"]
        self._engine = bind.sync_engine
        self.count = 0
        self.seen: list[str] = []

    def _seen(self, _connection: object, _cursor: object, statement: str, *_: object) -> None:
        if not statement.startswith("BEGIN"):
            self.seen.append(statement)
            self.count += 1

    def __enter__(self) -> "_Statements":
        event.listen(self._engine, "before_cursor_execute", self._seen)
        return self

    def __exit__(self, *_: object) -> None:
        event.remove(self._engine, "before_cursor_execute", self._seen)


def _other_site_part(arrays: MapArrays, reservation_id: str) -> Claim:
    """2 cores on the second site and 100 Mbps on its links; no accelerators, no quota."""
    site = arrays.map.sites[1]
    links = tuple(sorted(link.id for link in arrays.map.links if site.id in (link.a, link.b)))
    return _part(
        arrays,
        reservation_id,
        site_id=site.id,
        cpu_m=2000,
        accelerator_model=None,
        accelerator_milli=0,
        link_ids=links,
        mbps=100,
    )


async def test_commit_many_answers_every_entry_of_a_mixed_batch_with_a_fixed_number_of_statements(
    sessions: Sessions, ledger: MapArrays
) -> None:
    for rid in ("rsv-p1", "rsv-p2", "rsv-h", "rsv-r"):
        assert await _prepare(sessions, _part(ledger, rid, cpu_m=100)) is True
    assert await _prepare(sessions, _part(ledger, "rsv-x", cpu_m=100), timedelta(seconds=1))
    async with sessions.begin() as session:
        held = await peer_ledger.commit(
            session, reservation_id="rsv-h", decision={"site": "old"}, request={"id": "h"}
        )
        assert held is None
        assert await peer_ledger.release(session, reservation_id="rsv-r") is True
    entries: list[tuple[str, dict[str, object] | None, dict[str, object] | None]] = [
        ("rsv-p1", {"site": "a"}, {"id": "r1"}),
        ("rsv-h", {"site": "new"}, None),
        ("rsv-none", None, None),
        ("rsv-r", {"site": "b"}, None),
        ("rsv-p1", {"site": "other"}, {"id": "other"}),
        ("rsv-x", None, None),
        ("rsv-p2", None, None),
    ]

    async with sessions.begin() as session:
        with _Statements(sessions) as statements:
            results = await peer_ledger.commit_many(
                session, entries=entries, now=utcnow() + timedelta(seconds=3)
            )

    assert results[0] is None and results[1] is None and results[4] is None
    assert results[6] is None
    assert results[2] is not None and "never prepared" in results[2]
    assert results[3] is not None and "released before" in results[3]
    assert results[5] is not None and "expired" in results[5]
    assert statements.count == 2, statements.seen
    async with sessions() as session:
        p1 = await peer_ledger.get(session, reservation_id="rsv-p1")
        p2 = await peer_ledger.get(session, reservation_id="rsv-p2")
        h = await peer_ledger.get(session, reservation_id="rsv-h")
        x = await peer_ledger.get(session, reservation_id="rsv-x")
        r = await peer_ledger.get(session, reservation_id="rsv-r")
        assert await peer_ledger.get(session, reservation_id="rsv-none") is None
    assert p1 is not None and p1.state == ReservationState.HELD and p1.expires_at is None
    assert p1.decision == {"site": "a"} and p1.request == {"id": "r1"}
    assert p2 is not None and p2.state == ReservationState.HELD and p2.decision is None
    assert h is not None and h.decision == {"site": "old"} and h.request == {"id": "h"}
    assert x is not None and x.state == ReservationState.PREPARED
    assert r is not None and r.state == ReservationState.RELEASED and r.decision is None

    async with sessions.begin() as session:
        again = await peer_ledger.commit_many(session, entries=entries[:3])
        assert await peer_ledger.commit_many(session, entries=[]) == []
    assert again[:2] == [None, None] and again[2] is not None


async def test_release_many_gives_each_part_of_a_mixed_batch_back_exactly_once(
    sessions: Sessions, ledger: MapArrays
) -> None:
    before = await _snapshot(sessions, ledger)
    parts = [
        _part(ledger, "rsv-1"),
        _part(ledger, "rsv-2", cpu_m=1000, accelerator_milli=1000),
        _other_site_part(ledger, "rsv-s"),
        _part(ledger, "rsv-q", site_id=None, counts_quota=True),
        _part(ledger, "rsv-old", cpu_m=500),
    ]
    async with sessions.begin() as session:
        taken = await peer_ledger.prepare_many(session, claims=parts, expires_at=utcnow() + LATER)
    assert taken == [True] * len(parts)
    async with sessions.begin() as session:
        assert (
            await peer_ledger.commit(session, reservation_id="rsv-2", decision=None, request=None)
            is None
        )
        assert await peer_ledger.release(session, reservation_id="rsv-old") is True
    ids = ["rsv-2", "rsv-none", "rsv-old", "rsv-1", "rsv-2", "rsv-q", "rsv-s", "rsv-1"]

    async with sessions.begin() as session:
        with _Statements(sessions) as statements:
            released = await peer_ledger.release_many(session, reservation_ids=ids)

    assert released == [True, False, False, True, False, True, True, False]
    # The parts' update, their links, one update each of sites, pools, links, quotas, the
    # delete of their node takes, then the deletes of their flows' links and flows.
    assert statements.count == 9, statements.seen
    after = await _snapshot(sessions, ledger)
    assert (after.free_cpu_m == before.free_cpu_m).all()
    assert (after.free_mem_mib == before.free_mem_mib).all()
    assert (after.free_storage_gib == before.free_storage_gib).all()
    assert (after.free_acc == before.free_acc).all()
    assert (after.residual_mbps == before.residual_mbps).all()
    async with sessions() as session:
        await ledger_store.check_invariants(session)
        assert await peer_ledger.active_parts(session) == []
        quota = await session.get(Quota, TENANT, populate_existing=True)
    assert quota is not None
    assert (quota.used_cpu_m, quota.used_mem_mib, quota.used_acc_milli) == (0, 0, 0)
    assert (quota.used_mbps, quota.active_requests) == (0, 0)

    async with sessions.begin() as session:
        assert await peer_ledger.release_many(session, reservation_ids=ids) == [False] * len(ids)
        assert await peer_ledger.release_many(session, reservation_ids=[]) == []
    again = await _snapshot(sessions, ledger)
    assert (again.free_cpu_m == before.free_cpu_m).all()
    assert (again.residual_mbps == before.residual_mbps).all()
