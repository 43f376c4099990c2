"""The ledger in the database: the truth about what is reserved.

Contract:

- `reserve` takes a whole claim (site compute, accelerators, bandwidth on every link, the
  tenant's quota) or raises and leaves the caller to roll back. Every amount is taken by a
  conditional UPDATE (`used + external + amount <= cap`, `used + amount <= limit`), so
  concurrent transactions, in one process or several on one PostgreSQL database, never
  oversubscribe a site, an accelerator pool, a link or a quota.
- `reserve_many` (and `take_many`, the same without storing reservations, for the parts of
  cross-brain reservations) takes several claims at once, all or nothing: it adds up their
  amounts per site, accelerator pool, link and tenant, locks and checks the rows of each table,
  then takes each sum with a conditional UPDATE per table and inserts the reservations, so a
  batch costs a fixed number of statements whatever its size (on PostgreSQL: six locking
  reads and one statement for the updates and inserts, all plain SQL with arrays).
- Rows are locked in one global order (site rows by id, link rows by id, site capacity by site,
  accelerators by site and model, link capacity by link, quotas by tenant), so concurrent
  reserve/reserve_many/release/retire never deadlock. `reserve` locks one site; `reserve_many`
  locks the rows of each table with one `SELECT ... ORDER BY ... FOR UPDATE` (PostgreSQL locks
  such rows in the order of the sort) before it updates them.
- `release` gives back exactly what `reserve` took, once.
- Nothing here commits: the caller owns the transaction.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol, cast

import numpy as np
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Row,
    Select,
    Table,
    Update,
    and_,
    case,
    func,
    insert,
    literal,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import HOLDING, ReservationState
from cnbrain.ledger.claim import Claim, claim_from
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage._sql import execute_counted, fetch_scalar
from cnbrain.storage.errors import CapacityConflict, LedgerStoreError, QuotaExceeded
from cnbrain.storage.models import (
    LinkCapacity,
    LinkRecord,
    PeerReservation,
    PeerReservationLink,
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
    "amount_columns",
    "check_invariants",
    "claim_from",
    "claim_of_row",
    "give_back_many",
    "held_reservations",
    "load_snapshot",
    "release",
    "reservation_links",
    "reserve",
    "reserve_many",
    "take",
    "take_many",
]

ACTIVE = "active"
_HOLDING = sorted(HOLDING)
"""States of a cross-brain reservation part that hold capacity (see peer_ledger)."""


def claim_of_row(
    row: ReservationRecord | PeerReservation | Row[*tuple[Any, ...]], *, link_ids: Sequence[str]
) -> Claim:
    """The claim that a stored reservation or cross-brain part (or a row of their columns)
    holds, on `link_ids`. A reservation counts against the quota; a part when it says so."""
    return Claim(
        reservation_id=row.id,
        request_id=row.request_id,
        tenant_id=row.tenant_id,
        site_id=row.site_id,
        cpu_m=row.cpu_m,
        mem_mib=row.mem_mib,
        storage_gib=row.storage_gib,
        accelerator_model=row.accelerator_model,
        accelerator_count=row.accelerator_count,
        link_ids=tuple(link_ids),
        mbps=row.mbps,
        counts_quota=True if isinstance(row, ReservationRecord) else bool(row.counts_quota),
    )


def amount_columns(claim: Claim) -> dict[str, object]:
    """What `claim` takes, as the columns that reservations and cross-brain parts store."""
    return {
        "request_id": claim.request_id,
        "tenant_id": claim.tenant_id,
        "site_id": claim.site_id,
        "cpu_m": claim.cpu_m,
        "mem_mib": claim.mem_mib,
        "storage_gib": claim.storage_gib,
        "accelerator_model": claim.accelerator_model,
        "accelerator_count": claim.accelerator_count,
        "mbps": claim.mbps,
    }


async def load_snapshot(session: AsyncSession, *, arrays: MapArrays, version: int = 0) -> Snapshot:
    """Free capacity now (cap - used - external, never below 0) in the order of `arrays`.

    Retired sites and links show nothing free. Raises LedgerStoreError naming a site or link
    of `arrays` that the database does not know.
    """
    n, m = arrays.n_sites, len(arrays.accelerator_column)
    site_index, link_index = arrays.map.site_index, arrays.link_index
    cpu, mem, storage = (np.zeros(n, dtype=np.int64) for _ in range(3))
    acc = np.zeros((n, m), dtype=np.int64)
    mbps = np.zeros(len(arrays.map.links), dtype=np.int64)
    site_rows, pool_rows, link_rows = await _capacity_rows(session)
    seen_sites: set[str] = set()
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
    columns = arrays.accelerator_column
    for site_id, model, free, status in pool_rows:
        i, column = site_index.get(site_id), columns.get(model)
        if i is not None and column is not None and status == ACTIVE:
            acc[i, column] = free
    seen_links: set[str] = set()
    for link_id, status, free in link_rows:
        j = link_index.get(link_id)
        if j is None:
            continue
        seen_links.add(link_id)
        if status == ACTIVE:
            mbps[j] = free
    missing = [link for link in link_index if link not in seen_links]
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


async def take(session: AsyncSession, *, claim: Claim) -> None:
    """Take the amounts of `claim` in the global lock order: compute on its site (none when
    its site is None), bandwidth on its links, and the tenant's quota (when it counts it).
    Raises as `reserve` does; the caller records what was taken and rolls back after an
    exception."""
    _validate(claim)
    links = sorted(claim.link_ids)
    if claim.site_id is not None:
        await _lock_active(session, claim.site_id, links)
        await _take_site(session, claim)
        if claim.accelerator_count:
            await _take_accelerators(session, claim)
    elif links:
        await _lock_links_active(session, links)
    if links and claim.mbps:
        await _take_links(session, links, claim.mbps)
    if claim.counts_quota:
        await _take_quota(session, claim)


async def reserve(session: AsyncSession, *, claim: Claim, reservation_id: str) -> None:
    """Take `claim` as reservation `reservation_id` inside the caller's transaction.

    Raises CapacityConflict (a site, accelerator pool or link is short, or retired),
    QuotaExceeded (a tenant limit), or LedgerStoreError (a malformed claim, an id in use,
    a tenant without quota row). After any of them the caller must roll back: earlier
    updates of the same call may have been applied.
    """
    claim = _reservation(replace(claim, reservation_id=reservation_id))
    await take(session, claim=claim)
    links = sorted(claim.link_ids)
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
            state=ReservationState.HELD,
            created_at=utcnow(),
        )
    )
    if links:
        await session.execute(
            insert(ReservationLink),
            [{"reservation_id": reservation_id, "link_id": link} for link in links],
        )


async def reserve_many(
    session: AsyncSession, *, claims: Sequence[Claim] | Sequence[tuple[str, Claim]]
) -> None:
    """Take every claim of `claims` (a pair: the claim under that reservation id) as a held
    reservation inside the caller's transaction: all of them, or raise and leave the caller to
    roll back (earlier updates of the call may have been applied). Each needs a site and
    counts against its tenant's quota.

    The same checks as `reserve`, on the sums: the claims on one site, accelerator pool, link
    or tenant are added up and must fit together. Raises CapacityConflict (naming a site, pool
    or link that is short, retired or unknown), QuotaExceeded (naming the tenant's limit), or
    LedgerStoreError (a malformed claim, a reservation id given twice or in use, an unknown
    request, a tenant without quota row). Nothing happens for an empty `claims`.
    """
    if not claims:
        return
    held = [
        _reservation(replace(c[1], reservation_id=c[0]) if isinstance(c, tuple) else c)
        for c in claims
    ]
    ids = [claim.reservation_id for claim in held]
    if len(set(ids)) != len(ids):
        raise LedgerStoreError("a reservation id appears more than once")
    await _take_many(session, held, store=held)


def _reservation(claim: Claim) -> Claim:
    """`claim`, checked to be one a reservation can hold: on a site, counting the quota."""
    if claim.site_id is None or not claim.counts_quota:
        raise LedgerStoreError(
            f"claim for request {claim.request_id!r}: a reservation needs a site and counts"
            " against the quota"
        )
    return claim


async def take_many(session: AsyncSession, *, claims: Sequence[Claim]) -> None:
    """`take` of every claim of `claims` inside the caller's transaction,
    as `reserve_many` takes its claims (the amounts summed per row, a fixed number of
    statements) but without storing reservations: all of them, or raise as `reserve_many`
    does and leave the caller to roll back. Nothing happens for an empty `claims`."""
    if claims:
        await _take_many(session, claims, store=())


async def _take_many(
    session: AsyncSession,
    claims: Sequence[Claim],
    *,
    store: Sequence[Claim],
) -> None:
    """Lock, check and take the sums of `claims` and insert `store` as held reservations."""
    for claim in claims:
        _validate(claim)
    sums = _sums_of(claims)
    sites, pools, bandwidth, quotas = sums.sites, sums.pools, sums.bandwidth, sums.quotas
    links = sorted({link for claim in claims for link in claim.link_ids})
    tables: _Tables = (
        _DriverTables(session)
        if session.get_bind().dialect.name == "postgresql"
        else _CoreTables(session)
    )
    for kind, ids in (("site", sorted(sites)), ("link", links)):
        if ids:
            status = await tables.share_lock(kind, ids)
            for item in ids:
                if status.get(item) != ACTIVE:
                    raise CapacityConflict(f"{kind} {item!r}", "not registered, or retired")
    free_sites = await tables.lock_sites(sorted(sites)) if sites else {}
    for site in sorted(sites):
        if site not in free_sites:
            raise CapacityConflict(f"site {site!r}", "has no capacity row")
        for i, name in enumerate(("cpu", "memory", "storage")):
            if sites[site][i] > free_sites[site][i]:
                raise CapacityConflict(
                    f"site {site!r} {name}", _short(sites[site][i], free_sites[site][i])
                )
    if pools:
        free_pools = await tables.lock_pools(sorted(pools))
        for site, model in sorted(pools):
            left = free_pools.get((site, model), 0)
            if pools[site, model] > left:
                raise CapacityConflict(f"site {site!r} {model}", _short(pools[site, model], left))
    if bandwidth:
        free_links = await tables.lock_links(sorted(bandwidth))
        for link in sorted(bandwidth):
            if bandwidth[link] > free_links.get(link, 0):
                raise CapacityConflict(
                    f"link {link!r} bandwidth", _short(bandwidth[link], free_links.get(link, 0))
                )
    found = await tables.lock_quotas(sorted(quotas)) if quotas else {}
    for tenant in sorted(quotas):
        if tenant not in found:
            raise LedgerStoreError(f"tenant {tenant!r} has no quota row")
        for i, name in enumerate(_QUOTA_NAMES):
            used, limit, need = found[tenant][2 * i], found[tenant][2 * i + 1], quotas[tenant][i]
            if limit is not None and used + need > limit:
                raise QuotaExceeded(
                    f"tenant {tenant!r} {name}", f"wants {need}, {limit - used} left"
                )
    # Every row is locked and checked: take the sums and store the reservations.
    try:
        changed = await tables.take(sums, store, utcnow())
    except IntegrityError as exc:
        raise LedgerStoreError(
            f"reservations cannot be stored (an id in use, or an unknown request): "
            f"{exc.orig or exc}"
        ) from None
    for keys, count, what in (
        (sites, changed[0], "sites"),
        (pools, changed[1], "accelerator pools"),
        (bandwidth, changed[2], "links"),
        (quotas, changed[3], "the quotas of"),
    ):
        _expect_rows(count, keys, what)


def _sums_of(claims: Sequence[Claim]) -> "_Sums":
    """What `claims` take (as `take`), summed per row."""
    sites: dict[str, list[int]] = {}
    pools: dict[tuple[str, str], int] = {}
    bandwidth: dict[str, int] = {}
    quotas: dict[str, list[int]] = {}
    for claim in claims:
        if claim.site_id is not None:
            _add(sites, claim.site_id, (claim.cpu_m, claim.mem_mib, claim.storage_gib))
            if claim.accelerator_count and claim.accelerator_model:
                pool = (claim.site_id, claim.accelerator_model)
                pools[pool] = pools.get(pool, 0) + claim.accelerator_count
        if claim.mbps:
            for link in claim.link_ids:
                bandwidth[link] = bandwidth.get(link, 0) + claim.mbps
        if claim.counts_quota:
            amounts = (claim.cpu_m, claim.mem_mib, claim.accelerator_count, claim.mbps, 1)
            _add(quotas, claim.tenant_id, amounts)
    return _Sums(sites=sites, pools=pools, bandwidth=bandwidth, quotas=quotas)


async def give_back_many(session: AsyncSession, *, claims: Sequence[Claim]) -> None:
    """Subtract from the `used` columns what `take` added for every claim of `claims`: the
    sums per row, with one UPDATE per table (site capacity,
    accelerator pools, links, quotas), each locking its rows in key order first (the global
    lock order of `take_many`). The caller has marked every claim's reservation released in
    the same transaction, so each is given back once. Nothing happens for an empty `claims`."""
    if not claims:
        return
    sums = _sums_of(claims)
    c, a, lc, q = _SITE_CAPACITY.c, _ACCELERATORS.c, _LINK_CAPACITY.c, _QUOTAS.c
    if sums.sites:
        ids = sorted(sums.sites)
        per_row = [_case(c.site_id, {k: v[i] for k, v in sums.sites.items()}) for i in range(3)]
        used = (c.cpu_m_used, c.mem_mib_used, c.storage_gib_used)
        await _subtract(
            session,
            update(_SITE_CAPACITY).where(c.site_id.in_(_locked(c.site_id, c.site_id.in_(ids)))),
            {u.key: u - n for u, n in zip(used, per_row, strict=True)},
        )
    if sums.pools:
        keys = sorted(sums.pools)
        pool = tuple_(a.site_id, a.model)
        per_pool = case(
            *(
                (and_(a.site_id == site, a.model == model), literal(n, BigInteger))
                for (site, model), n in sums.pools.items()
            )
        )
        locked = (
            select(a.site_id, a.model)
            .where(pool.in_(keys))
            .order_by(a.site_id, a.model)
            .with_for_update()
        )
        await _subtract(
            session, update(_ACCELERATORS).where(pool.in_(locked)), {"used": a.used - per_pool}
        )
    if sums.bandwidth:
        ids = sorted(sums.bandwidth)
        await _subtract(
            session,
            update(_LINK_CAPACITY).where(lc.link_id.in_(_locked(lc.link_id, lc.link_id.in_(ids)))),
            {"mbps_used": lc.mbps_used - _case(lc.link_id, sums.bandwidth)},
        )
    if sums.quotas:
        ids = sorted(sums.quotas)
        per_tenant = [
            _case(q.tenant_id, {k: v[i] for k, v in sums.quotas.items()}) for i in range(5)
        ]
        await _subtract(
            session,
            update(_QUOTAS).where(q.tenant_id.in_(_locked(q.tenant_id, q.tenant_id.in_(ids)))),
            {used.key: used - n for (used, _), n in zip(_quota_columns(), per_tenant, strict=True)},
        )


def _locked(key: Any, where: ColumnElement[bool]) -> Select[Any]:
    """The keys of the rows of `key`'s table that match `where`, locked in key order."""
    return select(key).where(where).order_by(key).with_for_update()


async def _subtract(session: AsyncSession, statement: Update, values: Mapping[str, Any]) -> None:
    await session.execute(statement.values(dict(values)))


async def release(session: AsyncSession, *, reservation_id: str) -> ReservationRecord:
    """Give back everything the reservation took and mark it released; returns the record.

    Raises LedgerStoreError if it is unknown or not held (so it is never given back twice).
    """
    taken = await execute_counted(
        session,
        update(ReservationRecord)
        .where(
            ReservationRecord.id == reservation_id, ReservationRecord.state == ReservationState.HELD
        )
        .values(state=ReservationState.RELEASED, released_at=utcnow()),
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
    await give_back_many(session, claims=[claim_of_row(record, link_ids=links)])
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
    query = select(ReservationRecord.id).where(ReservationRecord.state == ReservationState.HELD)
    if request_id is not None:
        query = query.where(ReservationRecord.request_id == request_id)
    if tenant_id is not None:
        query = query.where(ReservationRecord.tenant_id == tenant_id)
    rows = await session.scalars(query.order_by(ReservationRecord.created_at, ReservationRecord.id))
    return list(rows)


async def check_invariants(session: AsyncSession, *, require_fit: bool = True) -> None:
    """Raise AssertionError unless every `used` column (sites, accelerators, links, quotas)
    equals the sum over held reservations and over the prepared or held parts of cross-brain
    reservations (`peer_reservations`), and is not negative; with `require_fit`, also
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
        await _lock_links_active(session, links)


async def _lock_links_active(session: AsyncSession, links: Sequence[str]) -> None:
    """Share-lock the link rows (so retiring waits) and check they are active."""
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


_RESERVATIONS = cast("Table", ReservationRecord.__table__)
_RESERVATION_LINKS = cast("Table", ReservationLink.__table__)
_SITES = cast("Table", SiteRecord.__table__)
_LINKS = cast("Table", LinkRecord.__table__)
_SITE_CAPACITY = cast("Table", SiteCapacity.__table__)
_ACCELERATORS = cast("Table", SiteAccelerators.__table__)
_LINK_CAPACITY = cast("Table", LinkCapacity.__table__)
_QUOTAS = cast("Table", Quota.__table__)
_QUOTA_NAMES = ("cpu", "memory", "accelerators", "bandwidth", "active requests")
"""The quota columns `reserve_many` sums, in the order of its amounts."""


_CAPACITY_ROWS = (
    "SELECT 0, c.site_id, NULL::text, s.status, c.cpu_m_cap - c.cpu_m_used - c.cpu_m_external,"
    " c.mem_mib_cap - c.mem_mib_used - c.mem_mib_external,"
    " c.storage_gib_cap - c.storage_gib_used - c.storage_gib_external"
    " FROM site_capacity AS c JOIN sites AS s ON s.id = c.site_id"
    " UNION ALL SELECT 1, a.site_id, a.model, s.status, a.cap - a.used - a.external, 0, 0"
    " FROM site_accelerators AS a JOIN sites AS s ON s.id = a.site_id"
    " UNION ALL SELECT 2, c.link_id, NULL, l.status, c.mbps_cap - c.mbps_used - c.mbps_external,"
    " 0, 0 FROM link_capacity AS c JOIN links AS l ON l.id = c.link_id"
)
"""Free capacity of every site, accelerator pool and link, with its status, in one query:
(kind 0/1/2, site or link id, model, status, free amounts)."""


async def _capacity_rows(
    session: AsyncSession,
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """For `load_snapshot`: (site id, status, free cpu, memory, storage) per site capacity
    row, (site id, model, free, site status) per accelerator pool, (link id, status, free
    Mbps) per link capacity row. One plain query through the driver on PostgreSQL."""
    if session.get_bind().dialect.name == "postgresql":
        connection = await session.connection()
        rows: Sequence[Any] = (await connection.exec_driver_sql(_CAPACITY_ROWS)).all()
        return (
            [(r[1], r[3], r[4], r[5], r[6]) for r in rows if r[0] == 0],
            [(r[1], r[2], r[4], r[3]) for r in rows if r[0] == 1],
            [(r[1], r[3], r[4]) for r in rows if r[0] == 2],
        )
    c, a, lc = SiteCapacity, SiteAccelerators, LinkCapacity
    sites = await session.execute(
        select(
            c.site_id,
            SiteRecord.status,
            c.cpu_m_cap - c.cpu_m_used - c.cpu_m_external,
            c.mem_mib_cap - c.mem_mib_used - c.mem_mib_external,
            c.storage_gib_cap - c.storage_gib_used - c.storage_gib_external,
        ).join(SiteRecord, SiteRecord.id == c.site_id)
    )
    pools = await session.execute(
        select(a.site_id, a.model, a.cap - a.used - a.external, SiteRecord.status).join(
            SiteRecord, SiteRecord.id == a.site_id
        )
    )
    links = await session.execute(
        select(lc.link_id, LinkRecord.status, lc.mbps_cap - lc.mbps_used - lc.mbps_external).join(
            LinkRecord, LinkRecord.id == lc.link_id
        )
    )
    return (
        [tuple(r) for r in sites.all()],
        [tuple(r) for r in pools.all()],
        [tuple(r) for r in links.all()],
    )


def _add(totals: dict[str, list[int]], key: str, amounts: Iterable[int]) -> None:
    total = totals.setdefault(key, [0, 0, 0, 0, 0])
    for i, amount in enumerate(amounts):
        total[i] += amount


def _expect_rows(changed: int, keys: Mapping[Any, Any], what: str) -> None:
    """CapacityConflict unless every row of `keys` changed. The rows were locked and checked
    before the update, so a shortfall is a surprise."""
    if changed != len(keys):
        names = ", ".join(sorted(str(k) for k in keys))
        raise CapacityConflict(f"{what} {names}", "changed concurrently; try again")


@dataclass(frozen=True, slots=True)
class _Sums:
    """What a batch of claims takes, summed: per site (cpu, memory, storage), per accelerator
    pool (site, model), per link (Mbps), per tenant (cpu, memory, accelerators, Mbps,
    requests)."""

    sites: Mapping[str, Sequence[int]]
    pools: Mapping[tuple[str, str], int]
    bandwidth: Mapping[str, int]
    quotas: Mapping[str, Sequence[int]]


class _Tables(Protocol):
    """What `reserve_many` needs of the capacity tables, in one transaction. Every `lock_*`
    locks its rows in key order (`ORDER BY ... FOR UPDATE`) and returns what is free."""

    async def share_lock(self, kind: str, ids: Sequence[str]) -> dict[str, str]:
        """Share-lock the site or link rows (`kind`) in id order; id -> status."""
        ...

    async def lock_sites(self, ids: Sequence[str]) -> dict[str, tuple[int, int, int]]: ...

    async def lock_pools(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]: ...

    async def lock_links(self, ids: Sequence[str]) -> dict[str, int]: ...

    async def lock_quotas(self, ids: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        """tenant -> (used, limit) pairs of the `_QUOTA_NAMES` columns, flattened."""
        ...

    async def take(
        self, sums: _Sums, claims: Sequence[Claim], at: datetime
    ) -> tuple[int, int, int, int]:
        """Add the sums to `used` where they fit (rows locked already) and insert the
        reservations; the rows changed in site capacity, pools, links and quotas."""
        ...


class _CoreTables:
    """`_Tables` in portable SQLAlchemy Core (SQLite): amounts per row as CASE expressions."""

    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def share_lock(self, kind: str, ids: Sequence[str]) -> dict[str, str]:
        table = _SITES if kind == "site" else _LINKS
        rows = await self._session.execute(
            select(table.c.id, table.c.status)
            .where(table.c.id.in_(ids))
            .order_by(table.c.id)
            .with_for_update(read=True)
        )
        return dict(rows.all())

    async def lock_sites(self, ids: Sequence[str]) -> dict[str, tuple[int, int, int]]:
        c = _SITE_CAPACITY.c
        rows = await self._session.execute(
            select(
                c.site_id,
                c.cpu_m_cap - c.cpu_m_used - c.cpu_m_external,
                c.mem_mib_cap - c.mem_mib_used - c.mem_mib_external,
                c.storage_gib_cap - c.storage_gib_used - c.storage_gib_external,
            )
            .where(c.site_id.in_(ids))
            .order_by(c.site_id)
            .with_for_update()
        )
        return {site: (cpu, mem, storage) for site, cpu, mem, storage in rows}

    async def add_sites(self, amounts: Mapping[str, Sequence[int]]) -> int:
        c = _SITE_CAPACITY.c
        columns = (
            (c.cpu_m_used, c.cpu_m_external, c.cpu_m_cap),
            (c.mem_mib_used, c.mem_mib_external, c.mem_mib_cap),
            (c.storage_gib_used, c.storage_gib_external, c.storage_gib_cap),
        )
        per_row = [_case(c.site_id, {k: v[i] for k, v in amounts.items()}) for i in range(3)]
        return await self._update(
            update(_SITE_CAPACITY)
            .where(
                c.site_id.in_(list(amounts)),
                *(u + e + a <= cap for (u, e, cap), a in zip(columns, per_row, strict=True)),
            )
            .values({u.key: u + a for (u, _, _), a in zip(columns, per_row, strict=True)})
        )

    async def lock_pools(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        a = _ACCELERATORS.c
        rows = await self._session.execute(
            select(a.site_id, a.model, a.cap - a.used - a.external)
            .where(tuple_(a.site_id, a.model).in_(keys))
            .order_by(a.site_id, a.model)
            .with_for_update()
        )
        return {(site, model): left for site, model, left in rows}

    async def add_pools(self, amounts: Mapping[tuple[str, str], int]) -> int:
        a = _ACCELERATORS.c
        per_row = case(
            *(
                (and_(a.site_id == site, a.model == model), literal(n, BigInteger))
                for (site, model), n in amounts.items()
            )
        )
        return await self._update(
            update(_ACCELERATORS)
            .where(
                tuple_(a.site_id, a.model).in_(list(amounts)),
                a.used + a.external + per_row <= a.cap,
            )
            .values(used=a.used + per_row)
        )

    async def lock_links(self, ids: Sequence[str]) -> dict[str, int]:
        return dict(await _lock_link_capacity(self._session, ids))

    async def add_links(self, amounts: Mapping[str, int]) -> int:
        c = _LINK_CAPACITY.c
        per_row = _case(c.link_id, amounts)
        return await self._update(
            update(_LINK_CAPACITY)
            .where(
                c.link_id.in_(list(amounts)), c.mbps_used + c.mbps_external + per_row <= c.mbps_cap
            )
            .values(mbps_used=c.mbps_used + per_row)
        )

    async def lock_quotas(self, ids: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        q = _QUOTAS.c
        rows = await self._session.execute(
            select(q.tenant_id, *(col for pair in _quota_columns() for col in pair))
            .where(q.tenant_id.in_(ids))
            .order_by(q.tenant_id)
            .with_for_update()
        )
        return {row[0]: tuple(row[1:]) for row in rows}

    async def add_quotas(self, amounts: Mapping[str, Sequence[int]]) -> int:
        q = _QUOTAS.c
        pairs = _quota_columns()
        per_row = [_case(q.tenant_id, {k: v[i] for k, v in amounts.items()}) for i in range(5)]
        return await self._update(
            update(_QUOTAS)
            .where(
                q.tenant_id.in_(list(amounts)),
                *(
                    or_(limit.is_(None), used + a <= limit)
                    for (used, limit), a in zip(pairs, per_row, strict=True)
                ),
            )
            .values({used.key: used + a for (used, _), a in zip(pairs, per_row, strict=True)})
        )

    async def insert_reservations(self, claims: Sequence[Claim], at: datetime) -> None:
        await self._session.execute(
            insert(_RESERVATIONS),
            [
                {
                    "id": claim.reservation_id,
                    **amount_columns(claim),
                    "state": ReservationState.HELD,
                    "created_at": at,
                    "released_at": None,
                }
                for claim in claims
            ],
        )
        links = [
            {"reservation_id": claim.reservation_id, "link_id": link}
            for claim in claims
            for link in sorted(claim.link_ids)
        ]
        if links:
            await self._session.execute(insert(_RESERVATION_LINKS), links)

    async def take(
        self, sums: _Sums, claims: Sequence[Claim], at: datetime
    ) -> tuple[int, int, int, int]:
        changed = (
            await self.add_sites(sums.sites) if sums.sites else 0,
            await self.add_pools(sums.pools) if sums.pools else 0,
            await self.add_links(sums.bandwidth) if sums.bandwidth else 0,
            await self.add_quotas(sums.quotas) if sums.quotas else 0,
        )
        if claims:
            await self.insert_reservations(claims, at)
        return changed

    async def _update(self, statement: Any) -> int:
        return int(cast("Any", await self._session.execute(statement)).rowcount)


class _DriverTables:
    """`_Tables` on PostgreSQL as plain SQL through the driver, with the amounts as arrays
    (`unnest`): fixed statements whatever the batch, prepared once per connection, without
    SQLAlchemy's compilation (about a sixth of the CPU time of the Core statements)."""

    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def _sql(self, statement: str, *parameters: Any) -> Any:
        connection = await self._session.connection()
        return await connection.exec_driver_sql(statement, parameters)

    async def share_lock(self, kind: str, ids: Sequence[str]) -> dict[str, str]:
        table = "sites" if kind == "site" else "links"
        rows = await self._sql(
            f"SELECT id, status FROM {table} WHERE id = ANY($1::text[]) ORDER BY id FOR SHARE",
            list(ids),
        )
        return dict(rows.all())

    async def lock_sites(self, ids: Sequence[str]) -> dict[str, tuple[int, int, int]]:
        rows = await self._sql(
            "SELECT site_id, cpu_m_cap - cpu_m_used - cpu_m_external,"
            " mem_mib_cap - mem_mib_used - mem_mib_external,"
            " storage_gib_cap - storage_gib_used - storage_gib_external"
            " FROM site_capacity WHERE site_id = ANY($1::text[]) ORDER BY site_id FOR UPDATE",
            list(ids),
        )
        return {site: (cpu, mem, storage) for site, cpu, mem, storage in rows}

    async def lock_pools(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        rows = await self._sql(
            "SELECT a.site_id, a.model, a.cap - a.used - a.external FROM site_accelerators AS a"
            " JOIN unnest($1::text[], $2::text[]) AS k(site_id, model)"
            " ON a.site_id = k.site_id AND a.model = k.model"
            " ORDER BY a.site_id, a.model FOR UPDATE OF a",
            [site for site, _ in keys],
            [model for _, model in keys],
        )
        return {(site, model): left for site, model, left in rows}

    async def lock_links(self, ids: Sequence[str]) -> dict[str, int]:
        rows = await self._sql(
            "SELECT link_id, mbps_cap - mbps_used - mbps_external FROM link_capacity"
            " WHERE link_id = ANY($1::text[]) ORDER BY link_id FOR UPDATE",
            list(ids),
        )
        return dict(rows.all())

    async def lock_quotas(self, ids: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        columns = ", ".join(f"{u.key}, {limit.key}" for u, limit in _quota_columns())
        rows = await self._sql(
            f"SELECT tenant_id, {columns} FROM quotas WHERE tenant_id = ANY($1::text[])"
            " ORDER BY tenant_id FOR UPDATE",
            list(ids),
        )
        return {row[0]: tuple(row[1:]) for row in rows}

    async def take(
        self, sums: _Sums, claims: Sequence[Claim], at: datetime
    ) -> tuple[int, int, int, int]:
        """One statement: an UPDATE per table and the INSERTs, as data-modifying CTEs (the
        rows are locked already, so their order does not matter any more)."""
        site_ids, pools, links, tenants = (
            list(sums.sites),
            list(sums.pools),
            list(sums.bandwidth),
            list(sums.quotas),
        )
        pairs = _quota_columns()
        quota_sets = ", ".join(f"{u.key} = q.{u.key} + v.a{i}" for i, (u, _) in enumerate(pairs))
        quota_fits = " AND ".join(
            f"(q.{limit.key} IS NULL OR q.{u.key} + v.a{i} <= q.{limit.key})"
            for i, (u, limit) in enumerate(pairs)
        )
        held = [(x.reservation_id, link) for x in claims for link in sorted(x.link_ids)]
        c = claims
        row = (
            await self._sql(
                "WITH s AS (UPDATE site_capacity AS c SET cpu_m_used = c.cpu_m_used + v.cpu,"
                " mem_mib_used = c.mem_mib_used + v.mem,"
                " storage_gib_used = c.storage_gib_used + v.storage"
                " FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])"
                " AS v(site_id, cpu, mem, storage) WHERE c.site_id = v.site_id"
                " AND c.cpu_m_used + c.cpu_m_external + v.cpu <= c.cpu_m_cap"
                " AND c.mem_mib_used + c.mem_mib_external + v.mem <= c.mem_mib_cap"
                " AND c.storage_gib_used + c.storage_gib_external + v.storage"
                " <= c.storage_gib_cap RETURNING 1),"
                " a AS (UPDATE site_accelerators AS a SET used = a.used + v.n"
                " FROM unnest($5::text[], $6::text[], $7::bigint[]) AS v(site_id, model, n)"
                " WHERE a.site_id = v.site_id AND a.model = v.model"
                " AND a.used + a.external + v.n <= a.cap RETURNING 1),"
                " l AS (UPDATE link_capacity AS c SET mbps_used = c.mbps_used + v.mbps"
                " FROM unnest($8::text[], $9::bigint[]) AS v(link_id, mbps)"
                " WHERE c.link_id = v.link_id"
                " AND c.mbps_used + c.mbps_external + v.mbps <= c.mbps_cap RETURNING 1),"
                f" q AS (UPDATE quotas AS q SET {quota_sets}"
                " FROM unnest($10::text[], $11::bigint[], $12::bigint[], $13::bigint[],"
                " $14::bigint[], $15::bigint[]) AS v(tenant_id, a0, a1, a2, a3, a4)"
                f" WHERE q.tenant_id = v.tenant_id AND {quota_fits} RETURNING 1),"
                " r AS (INSERT INTO reservations (id, request_id, tenant_id, site_id, cpu_m,"
                " mem_mib, storage_gib, accelerator_model, accelerator_count, mbps, state,"
                " created_at) SELECT v.*, $26, $27 FROM unnest($16::text[], $17::text[],"
                " $18::text[], $19::text[], $20::bigint[], $21::bigint[], $22::bigint[],"
                " $23::text[], $24::bigint[], $25::bigint[]) AS v RETURNING 1),"
                " rl AS (INSERT INTO reservation_links (reservation_id, link_id)"
                " SELECT * FROM unnest($28::text[], $29::text[]) RETURNING 1)"
                " SELECT (SELECT count(*) FROM s), (SELECT count(*) FROM a),"
                " (SELECT count(*) FROM l), (SELECT count(*) FROM q),"
                " (SELECT count(*) FROM r), (SELECT count(*) FROM rl)",
                site_ids,
                *([sums.sites[k][i] for k in site_ids] for i in range(3)),
                [site for site, _ in pools],
                [model for _, model in pools],
                [sums.pools[k] for k in pools],
                links,
                [sums.bandwidth[k] for k in links],
                tenants,
                *([sums.quotas[k][i] for k in tenants] for i in range(len(pairs))),
                [x.reservation_id for x in c],
                [x.request_id for x in c],
                [x.tenant_id for x in c],
                [x.site_id for x in c],
                [x.cpu_m for x in c],
                [x.mem_mib for x in c],
                [x.storage_gib for x in c],
                [x.accelerator_model for x in c],
                [x.accelerator_count for x in c],
                [x.mbps for x in c],
                ReservationState.HELD,
                at,
                [rid for rid, _ in held],
                [link for _, link in held],
            )
        ).one()
        if (row[4], row[5]) != (len(claims), len(held)):
            raise LedgerStoreError("not every reservation was stored")
        return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def _case(key: Any, amounts: Mapping[Any, int]) -> ColumnElement[int]:
    """`amounts[key]` of each row, as SQL: CASE key WHEN k1 THEN a1 ... END."""
    return case({k: literal(v, BigInteger) for k, v in amounts.items()}, value=key)


def _quota_columns() -> tuple[tuple[Any, Any], ...]:
    """(used, limit) columns of the quotas table, in the order of `_QUOTA_NAMES`."""
    q = _QUOTAS.c
    return (
        (q.used_cpu_m, q.limit_cpu_m),
        (q.used_mem_mib, q.limit_mem_mib),
        (q.used_accelerators, q.limit_accelerators),
        (q.used_mbps, q.limit_mbps),
        (q.active_requests, q.limit_active_requests),
    )


def _short(want: int, free: int) -> str:
    return f"wants {want}, {max(free, 0)} free"


async def _check_sites(session: AsyncSession, require_fit: bool) -> None:
    r = ReservationRecord
    held = {
        site: (cpu, mem, storage)
        for site, cpu, mem, storage in await session.execute(
            select(r.site_id, func.sum(r.cpu_m), func.sum(r.mem_mib), func.sum(r.storage_gib))
            .where(r.state == ReservationState.HELD)
            .group_by(r.site_id)
        )
    }
    p = PeerReservation
    for site, cpu, mem, storage in await session.execute(
        select(p.site_id, func.sum(p.cpu_m), func.sum(p.mem_mib), func.sum(p.storage_gib))
        .where(p.state.in_(_HOLDING), p.site_id.is_not(None))
        .group_by(p.site_id)
    ):
        before = held.get(str(site), (0, 0, 0))
        held[str(site)] = (before[0] + cpu, before[1] + mem, before[2] + storage)
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
            .where(r.state == ReservationState.HELD, r.accelerator_model.is_not(None))
            .group_by(r.site_id, r.accelerator_model)
        )
    }
    p = PeerReservation
    for site, model, count in await session.execute(
        select(p.site_id, p.accelerator_model, func.sum(p.accelerator_count))
        .where(p.state.in_(_HOLDING), p.site_id.is_not(None), p.accelerator_model.is_not(None))
        .group_by(p.site_id, p.accelerator_model)
    ):
        key = (str(site), model)
        held[key] = held.get(key, 0) + count
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
        .where(r.state == ReservationState.HELD)
        .group_by(rl.link_id)
    )
    held = dict(rows.all())
    p, pl = PeerReservation, PeerReservationLink
    for link, mbps in await session.execute(
        select(pl.link_id, func.sum(p.mbps))
        .join(p, p.id == pl.reservation_id)
        .where(p.state.in_(_HOLDING))
        .group_by(pl.link_id)
    ):
        held[link] = held.get(link, 0) + mbps
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
            .where(r.state == ReservationState.HELD)
            .group_by(r.tenant_id)
        )
    }
    p = PeerReservation
    for tenant, cpu, mem, acc, mbps, count in await session.execute(
        select(
            p.tenant_id,
            func.sum(p.cpu_m),
            func.sum(p.mem_mib),
            func.sum(p.accelerator_count),
            func.sum(p.mbps),
            func.count(),
        )
        .where(p.state.in_(_HOLDING), p.counts_quota.is_(True))
        .group_by(p.tenant_id)
    ):
        b = held.get(tenant, (0, 0, 0, 0, 0))
        held[tenant] = (b[0] + cpu, b[1] + mem, b[2] + acc, b[3] + mbps, b[4] + count)
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
