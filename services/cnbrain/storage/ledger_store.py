"""The ledger in the database: the truth about what is reserved.

Contract:

- `reserve` takes a whole claim (site compute, accelerators, bandwidth on every link, the
  tenant's quota) or raises and leaves the caller to roll back. Every amount is taken by a
  conditional UPDATE (`used + external + amount <= cap`, `used + amount <= limit`), so
  concurrent transactions, in one process or several on one PostgreSQL database, never
  oversubscribe a site, an accelerator pool, a link or a quota.
- Rows are locked in one global order (site row, link rows by id, site capacity, accelerators,
  link capacity by id, quota), so concurrent reserve/release/retire never deadlock.
- `release` gives back exactly what `reserve` took, once.
- Nothing here commits: the caller owns the transaction.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from sqlalchemy import ColumnElement, and_, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.ledger.reservation import Reservation
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage._sql import execute_counted, fetch_scalar
from cnbrain.storage.errors import CapacityConflict, LedgerStoreError, QuotaExceeded
from cnbrain.storage.models import (
    LinkCapacity,
    LinkRecord,
    Quota,
    ReservationLink,
    ReservationRecord,
    SiteAccelerators,
    SiteCapacity,
    SiteRecord,
    utcnow,
)

__all__ = [
    "CapacityConflict",
    "Claim",
    "LedgerStoreError",
    "QuotaExceeded",
    "check_invariants",
    "claim_from",
    "held_reservations",
    "load_snapshot",
    "release",
    "reservation_links",
    "reserve",
]

HELD = "held"
RELEASED = "released"
ACTIVE = "active"


@dataclass(frozen=True, slots=True)
class Claim:
    """What one reservation takes, by id and in integer units: compute on `site_id`
    (`accelerator_count` of `accelerator_model`, None when no accelerator) and `mbps` on every
    link of `link_ids`; it counts against `tenant_id`'s quota as one active request."""

    request_id: str
    tenant_id: str
    site_id: str
    cpu_m: int
    mem_mib: int
    storage_gib: int
    accelerator_model: str | None
    accelerator_count: int
    link_ids: tuple[str, ...]
    mbps: int


def _link_index(arrays: MapArrays) -> dict[str, int]:
    return {link.id: j for j, link in enumerate(arrays.map.links)}


def claim_from(reservation: Reservation, *, arrays: MapArrays, tenant_id: str) -> Claim:
    """The claim of an engine `Reservation` (indices into `arrays`) for `tenant_id`."""
    compute = reservation.compute
    models = {column: model for model, column in arrays.accelerator_column.items()}
    model = models[compute.acc_column] if compute.acc_count else None
    return Claim(
        request_id=reservation.request_id,
        tenant_id=tenant_id,
        site_id=arrays.map.sites[compute.site].id,
        cpu_m=compute.cpu_m,
        mem_mib=compute.mem_mib,
        storage_gib=compute.storage_gib,
        accelerator_model=model,
        accelerator_count=compute.acc_count if model else 0,
        link_ids=tuple(arrays.map.links[i].id for i in reservation.links),
        mbps=reservation.mbps,
    )


async def load_snapshot(session: AsyncSession, *, arrays: MapArrays, version: int = 0) -> Snapshot:
    """Free capacity now (cap - used - external, never below 0) in the order of `arrays`.

    Retired sites and links show nothing free. Raises LedgerStoreError naming a site or link
    of `arrays` that the database does not know.
    """
    n, m = arrays.n_sites, len(arrays.accelerator_column)
    site_index, link_index = arrays.map.site_index, _link_index(arrays)
    cpu, mem, storage = (np.zeros(n, dtype=np.int64) for _ in range(3))
    acc = np.zeros((n, m), dtype=np.int64)
    mbps = np.zeros(len(arrays.map.links), dtype=np.int64)
    seen_sites: set[str] = set()
    site_rows = await session.execute(
        select(
            SiteCapacity.site_id,
            SiteRecord.status,
            SiteCapacity.cpu_m_cap - SiteCapacity.cpu_m_used - SiteCapacity.cpu_m_external,
            SiteCapacity.mem_mib_cap - SiteCapacity.mem_mib_used - SiteCapacity.mem_mib_external,
            SiteCapacity.storage_gib_cap
            - SiteCapacity.storage_gib_used
            - SiteCapacity.storage_gib_external,
        ).join(SiteRecord, SiteRecord.id == SiteCapacity.site_id)
    )
    for site_id, status, free_cpu, free_mem, free_storage in site_rows:
        i = site_index.get(site_id)
        if i is None:
            continue
        seen_sites.add(site_id)
        if status == ACTIVE:
            cpu[i], mem[i], storage[i] = free_cpu, free_mem, free_storage
    missing = [s.id for s in arrays.map.sites if s.id not in seen_sites]
    if missing:
        raise LedgerStoreError(f"site {missing[0]!r} is not in the database")
    pools = await session.execute(
        select(
            SiteAccelerators.site_id,
            SiteAccelerators.model,
            SiteAccelerators.cap - SiteAccelerators.used - SiteAccelerators.external,
            SiteRecord.status,
        ).join(SiteRecord, SiteRecord.id == SiteAccelerators.site_id)
    )
    for site_id, model, free, status in pools:
        i, column = site_index.get(site_id), arrays.accelerator_column.get(model)
        if i is not None and column is not None and status == ACTIVE:
            acc[i, column] = free
    seen_links: set[str] = set()
    link_rows = await session.execute(
        select(
            LinkCapacity.link_id,
            LinkRecord.status,
            LinkCapacity.mbps_cap - LinkCapacity.mbps_used - LinkCapacity.mbps_external,
        ).join(LinkRecord, LinkRecord.id == LinkCapacity.link_id)
    )
    for link_id, status, free in link_rows:
        j = link_index.get(link_id)
        if j is None:
            continue
        seen_links.add(link_id)
        if status == ACTIVE:
            mbps[j] = free
    missing = [link.id for link in arrays.map.links if link.id not in seen_links]
    if missing:
        raise LedgerStoreError(f"link {missing[0]!r} is not in the database")

    return Snapshot.of_free(
        arrays,
        version=version,
        free_cpu_m=cpu,
        free_mem_mib=mem,
        free_storage_gib=storage,
        free_acc=acc,
        residual_mbps=mbps,
    )


async def reserve(session: AsyncSession, *, claim: Claim, reservation_id: str) -> None:
    """Take `claim` as reservation `reservation_id` inside the caller's transaction.

    Raises CapacityConflict (a site, accelerator pool or link is short, or retired),
    QuotaExceeded (a tenant limit), or LedgerStoreError (a malformed claim, an id in use,
    a tenant without quota row). After any of them the caller must roll back: earlier
    updates of the same call may have been applied.
    """
    _validate(claim)
    links = sorted(claim.link_ids)
    await _lock_active(session, claim.site_id, links)
    await _take_site(session, claim)
    if claim.accelerator_count:
        await _take_accelerators(session, claim)
    if links and claim.mbps:
        await _take_links(session, links, claim.mbps)
    await _take_quota(session, claim)
    if await session.get(ReservationRecord, reservation_id) is not None:
        raise LedgerStoreError(f"reservation {reservation_id!r} exists already")
    await session.execute(
        insert(ReservationRecord).values(
            id=reservation_id,
            request_id=claim.request_id,
            tenant_id=claim.tenant_id,
            site_id=claim.site_id,
            cpu_m=claim.cpu_m,
            mem_mib=claim.mem_mib,
            storage_gib=claim.storage_gib,
            accelerator_model=claim.accelerator_model,
            accelerator_count=claim.accelerator_count,
            mbps=claim.mbps,
            state=HELD,
            created_at=utcnow(),
        )
    )
    if links:
        await session.execute(
            insert(ReservationLink),
            [{"reservation_id": reservation_id, "link_id": link} for link in links],
        )


async def release(session: AsyncSession, *, reservation_id: str) -> ReservationRecord:
    """Give back everything the reservation took and mark it released; returns the record.

    Raises LedgerStoreError if it is unknown or not held (so it is never given back twice).
    """
    taken = await execute_counted(
        session,
        update(ReservationRecord)
        .where(ReservationRecord.id == reservation_id, ReservationRecord.state == HELD)
        .values(state=RELEASED, released_at=utcnow()),
    )
    record = await fetch_scalar(
        session,
        select(ReservationRecord)
        .where(ReservationRecord.id == reservation_id)
        .execution_options(populate_existing=True),
    )
    if record is None:
        raise LedgerStoreError(f"reservation {reservation_id!r} is unknown")
    if not taken:
        raise LedgerStoreError(f"reservation {reservation_id!r} is not held ({record.state})")
    links = await reservation_links(session, reservation_id=reservation_id)
    await execute_counted(
        session,
        update(SiteCapacity)
        .where(SiteCapacity.site_id == record.site_id)
        .values(
            cpu_m_used=SiteCapacity.cpu_m_used - record.cpu_m,
            mem_mib_used=SiteCapacity.mem_mib_used - record.mem_mib,
            storage_gib_used=SiteCapacity.storage_gib_used - record.storage_gib,
        ),
    )
    if record.accelerator_model and record.accelerator_count:
        await execute_counted(
            session,
            update(SiteAccelerators)
            .where(
                SiteAccelerators.site_id == record.site_id,
                SiteAccelerators.model == record.accelerator_model,
            )
            .values(used=SiteAccelerators.used - record.accelerator_count),
        )
    if links and record.mbps:
        await _lock_link_capacity(session, links)
        await execute_counted(
            session,
            update(LinkCapacity)
            .where(LinkCapacity.link_id.in_(links))
            .values(mbps_used=LinkCapacity.mbps_used - record.mbps),
        )
    await execute_counted(
        session,
        update(Quota)
        .where(Quota.tenant_id == record.tenant_id)
        .values(
            used_cpu_m=Quota.used_cpu_m - record.cpu_m,
            used_mem_mib=Quota.used_mem_mib - record.mem_mib,
            used_accelerators=Quota.used_accelerators - record.accelerator_count,
            used_mbps=Quota.used_mbps - record.mbps,
            active_requests=Quota.active_requests - 1,
        ),
    )
    return record


async def reservation_links(session: AsyncSession, *, reservation_id: str) -> list[str]:
    """The link ids of a reservation, sorted."""
    rows = await session.scalars(
        select(ReservationLink.link_id)
        .where(ReservationLink.reservation_id == reservation_id)
        .order_by(ReservationLink.link_id)
    )
    return list(rows)


async def held_reservations(
    session: AsyncSession, *, request_id: str | None = None, tenant_id: str | None = None
) -> list[str]:
    """Ids of the reservations still held, optionally of one request and/or tenant, oldest
    first (pass each to `release`)."""
    query = select(ReservationRecord.id).where(ReservationRecord.state == HELD)
    if request_id is not None:
        query = query.where(ReservationRecord.request_id == request_id)
    if tenant_id is not None:
        query = query.where(ReservationRecord.tenant_id == tenant_id)
    rows = await session.scalars(query.order_by(ReservationRecord.created_at, ReservationRecord.id))
    return list(rows)


async def check_invariants(session: AsyncSession, *, require_fit: bool = True) -> None:
    """Raise AssertionError unless every `used` column (sites, accelerators, links, quotas)
    equals the sum over held reservations and is not negative; with `require_fit`, also
    used + external <= cap and quota use <= limit (true unless caps were lowered or external
    use reported after the reservations were taken)."""
    await _check_sites(session, require_fit)
    await _check_accelerators(session, require_fit)
    await _check_links(session, require_fit)
    await _check_quotas(session, require_fit)


def _validate(claim: Claim) -> None:
    where = f"claim for request {claim.request_id!r}"
    for name in ("cpu_m", "mem_mib", "storage_gib", "accelerator_count", "mbps"):
        if getattr(claim, name) < 0:
            raise LedgerStoreError(f"{where}: {name} is negative")
    if claim.accelerator_count and not claim.accelerator_model:
        raise LedgerStoreError(f"{where}: accelerator_count without accelerator_model")
    if len(set(claim.link_ids)) != len(claim.link_ids):
        raise LedgerStoreError(f"{where}: a link appears more than once")


async def _lock_active(session: AsyncSession, site_id: str, links: Sequence[str]) -> None:
    """Share-lock the site and link rows (so retiring waits) and check they are active."""
    site = await fetch_scalar(
        session,
        select(SiteRecord.status).where(SiteRecord.id == site_id).with_for_update(read=True),
    )
    if site != ACTIVE:
        raise CapacityConflict(f"site {site_id!r}", "not registered, or retired")
    if links:
        rows = await session.execute(
            select(LinkRecord.id, LinkRecord.status)
            .where(LinkRecord.id.in_(links))
            .order_by(LinkRecord.id)
            .with_for_update(read=True)
        )
        status = dict(rows.all())
        for link in links:
            if status.get(link) != ACTIVE:
                raise CapacityConflict(f"link {link!r}", "not registered, or retired")


def _fits(used: Any, external: Any, amount: int, cap: Any) -> ColumnElement[bool]:
    return cast("ColumnElement[bool]", used + external + amount <= cap)


async def _take_site(session: AsyncSession, claim: Claim) -> None:
    c = SiteCapacity
    taken = await execute_counted(
        session,
        update(c)
        .where(
            c.site_id == claim.site_id,
            _fits(c.cpu_m_used, c.cpu_m_external, claim.cpu_m, c.cpu_m_cap),
            _fits(c.mem_mib_used, c.mem_mib_external, claim.mem_mib, c.mem_mib_cap),
            _fits(c.storage_gib_used, c.storage_gib_external, claim.storage_gib, c.storage_gib_cap),
        )
        .values(
            cpu_m_used=c.cpu_m_used + claim.cpu_m,
            mem_mib_used=c.mem_mib_used + claim.mem_mib,
            storage_gib_used=c.storage_gib_used + claim.storage_gib,
        ),
    )
    if not taken:
        row = await session.get(SiteCapacity, claim.site_id, populate_existing=True)
        where = f"site {claim.site_id!r}"
        if row is None:
            raise CapacityConflict(where, "has no capacity row")
        for name, used, external, want, cap in (
            ("cpu", row.cpu_m_used, row.cpu_m_external, claim.cpu_m, row.cpu_m_cap),
            ("memory", row.mem_mib_used, row.mem_mib_external, claim.mem_mib, row.mem_mib_cap),
            (
                "storage",
                row.storage_gib_used,
                row.storage_gib_external,
                claim.storage_gib,
                row.storage_gib_cap,
            ),
        ):
            if used + external + want > cap:
                raise CapacityConflict(f"{where} {name}", _short(want, cap - used - external))
        raise CapacityConflict(where, "changed concurrently; try again")


async def _take_accelerators(session: AsyncSession, claim: Claim) -> None:
    a = SiteAccelerators
    taken = await execute_counted(
        session,
        update(a)
        .where(
            a.site_id == claim.site_id,
            a.model == claim.accelerator_model,
            _fits(a.used, a.external, claim.accelerator_count, a.cap),
        )
        .values(used=a.used + claim.accelerator_count),
    )
    if not taken:
        resource = f"site {claim.site_id!r} {claim.accelerator_model}"
        row = await session.get(
            SiteAccelerators, (claim.site_id, claim.accelerator_model), populate_existing=True
        )
        free = 0 if row is None else row.cap - row.used - row.external
        raise CapacityConflict(resource, _short(claim.accelerator_count, free))


async def _lock_link_capacity(session: AsyncSession, links: Sequence[str]) -> Mapping[str, int]:
    """Lock the capacity rows of `links` in id order; the free bandwidth of each."""
    rows = await session.execute(
        select(
            LinkCapacity.link_id,
            LinkCapacity.mbps_cap - LinkCapacity.mbps_used - LinkCapacity.mbps_external,
        )
        .where(LinkCapacity.link_id.in_(links))
        .order_by(LinkCapacity.link_id)
        .with_for_update()
    )
    return dict(rows.all())


async def _take_links(session: AsyncSession, links: Sequence[str], mbps: int) -> None:
    free = await _lock_link_capacity(session, links)
    for link in links:
        if free.get(link, 0) < mbps:
            raise CapacityConflict(f"link {link!r} bandwidth", _short(mbps, free.get(link, 0)))
    c = LinkCapacity
    taken = await execute_counted(
        session,
        update(c)
        .where(c.link_id.in_(links), _fits(c.mbps_used, c.mbps_external, mbps, c.mbps_cap))
        .values(mbps_used=c.mbps_used + mbps),
    )
    if taken != len(links):
        raise CapacityConflict(f"links {', '.join(links)}", "changed concurrently; try again")


def _within(used: Any, amount: int, limit: Any) -> ColumnElement[bool]:
    return or_(limit.is_(None), used + amount <= limit)


async def _take_quota(session: AsyncSession, claim: Claim) -> None:
    q = Quota
    checks = (
        ("cpu", q.used_cpu_m, claim.cpu_m, q.limit_cpu_m),
        ("memory", q.used_mem_mib, claim.mem_mib, q.limit_mem_mib),
        ("accelerators", q.used_accelerators, claim.accelerator_count, q.limit_accelerators),
        ("bandwidth", q.used_mbps, claim.mbps, q.limit_mbps),
        ("active requests", q.active_requests, 1, q.limit_active_requests),
    )
    taken = await execute_counted(
        session,
        update(q)
        .where(
            q.tenant_id == claim.tenant_id,
            and_(*(_within(used, amount, limit) for _, used, amount, limit in checks)),
        )
        .values(
            used_cpu_m=q.used_cpu_m + claim.cpu_m,
            used_mem_mib=q.used_mem_mib + claim.mem_mib,
            used_accelerators=q.used_accelerators + claim.accelerator_count,
            used_mbps=q.used_mbps + claim.mbps,
            active_requests=q.active_requests + 1,
        ),
    )
    if taken:
        return
    row = await session.get(Quota, claim.tenant_id, populate_existing=True)
    where = f"tenant {claim.tenant_id!r}"
    if row is None:
        raise LedgerStoreError(f"{where} has no quota row")
    for name, used_col, amount, limit_col in checks:
        used, limit = getattr(row, used_col.key), getattr(row, limit_col.key)
        if limit is not None and used + amount > limit:
            raise QuotaExceeded(f"{where} {name}", f"wants {amount}, {limit - used} left")
    raise QuotaExceeded(where, "changed concurrently; try again")


def _short(want: int, free: int) -> str:
    return f"wants {want}, {max(free, 0)} free"


async def _check_sites(session: AsyncSession, require_fit: bool) -> None:
    r = ReservationRecord
    held = {
        site: (cpu, mem, storage)
        for site, cpu, mem, storage in await session.execute(
            select(r.site_id, func.sum(r.cpu_m), func.sum(r.mem_mib), func.sum(r.storage_gib))
            .where(r.state == HELD)
            .group_by(r.site_id)
        )
    }
    for row in await session.scalars(select(SiteCapacity)):
        expected = held.pop(row.site_id, (0, 0, 0))
        for name, used, external, cap, want in (
            ("cpu", row.cpu_m_used, row.cpu_m_external, row.cpu_m_cap, expected[0]),
            ("memory", row.mem_mib_used, row.mem_mib_external, row.mem_mib_cap, expected[1]),
            (
                "storage",
                row.storage_gib_used,
                row.storage_gib_external,
                row.storage_gib_cap,
                expected[2],
            ),
        ):
            _expect(f"site {row.site_id!r} {name}", used, int(want), external, cap, require_fit)
    if held:
        raise AssertionError(f"reservations on sites without capacity rows: {sorted(held)}")


async def _check_accelerators(session: AsyncSession, require_fit: bool) -> None:
    r = ReservationRecord
    held = {
        (site, model): count
        for site, model, count in await session.execute(
            select(r.site_id, r.accelerator_model, func.sum(r.accelerator_count))
            .where(r.state == HELD, r.accelerator_model.is_not(None))
            .group_by(r.site_id, r.accelerator_model)
        )
    }
    for row in await session.scalars(select(SiteAccelerators)):
        want = int(held.pop((row.site_id, row.model), 0))
        where = f"site {row.site_id!r} {row.model}"
        _expect(where, row.used, want, row.external, row.cap, require_fit)
    if any(held.values()):
        raise AssertionError(f"accelerators held on pools that do not exist: {sorted(held)}")


async def _check_links(session: AsyncSession, require_fit: bool) -> None:
    r, rl = ReservationRecord, ReservationLink
    rows = await session.execute(
        select(rl.link_id, func.sum(r.mbps))
        .join(r, r.id == rl.reservation_id)
        .where(r.state == HELD)
        .group_by(rl.link_id)
    )
    held = dict(rows.all())
    for row in await session.scalars(select(LinkCapacity)):
        want = int(held.pop(row.link_id, 0))
        where = f"link {row.link_id!r} bandwidth"
        _expect(where, row.mbps_used, want, row.mbps_external, row.mbps_cap, require_fit)
    if any(held.values()):
        raise AssertionError(f"bandwidth held on links without capacity rows: {sorted(held)}")


async def _check_quotas(session: AsyncSession, require_fit: bool) -> None:
    r = ReservationRecord
    held = {
        tenant: (cpu, mem, acc, mbps, count)
        for tenant, cpu, mem, acc, mbps, count in await session.execute(
            select(
                r.tenant_id,
                func.sum(r.cpu_m),
                func.sum(r.mem_mib),
                func.sum(r.accelerator_count),
                func.sum(r.mbps),
                func.count(),
            )
            .where(r.state == HELD)
            .group_by(r.tenant_id)
        )
    }
    for row in await session.scalars(select(Quota)):
        expected = held.pop(row.tenant_id, (0, 0, 0, 0, 0))
        for name, used, limit, want in (
            ("cpu", row.used_cpu_m, row.limit_cpu_m, expected[0]),
            ("memory", row.used_mem_mib, row.limit_mem_mib, expected[1]),
            ("accelerators", row.used_accelerators, row.limit_accelerators, expected[2]),
            ("bandwidth", row.used_mbps, row.limit_mbps, expected[3]),
            ("active requests", row.active_requests, row.limit_active_requests, expected[4]),
        ):
            cap = limit if limit is not None else used
            _expect(f"tenant {row.tenant_id!r} {name}", used, int(want), 0, cap, require_fit)
    if held:
        raise AssertionError(f"reservations of tenants without quota rows: {sorted(held)}")


def _expect(where: str, used: int, want: int, external: int, cap: int, require_fit: bool) -> None:
    if used != want:
        raise AssertionError(f"{where}: used {used} but held reservations sum to {want}")
    if used < 0:
        raise AssertionError(f"{where}: used is negative ({used})")
    if require_fit and used + external > cap:
        raise AssertionError(f"{where}: used {used} + external {external} exceeds cap {cap}")
