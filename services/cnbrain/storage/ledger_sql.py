"""The SQL of the ledger's write path: one writer per dialect, chosen by the session's dialect.

`ledger_sql(session)` gives the writer of the session's dialect (decided once, by
`database.session_factory`): plain SQL with arrays through the driver on PostgreSQL, portable
SQLAlchemy Core elsewhere. A writer reads what is free (`free_capacity`, for snapshots), locks
the rows a batch needs in key order and reads what they have free or left (`lock_*`), and adds
a batch's sums to the rows it locked and checked (`take`). What is free is written once:
`free` (cap - used - external) and `left` (limit - used); the caller compares.
"""

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    FromClause,
    Join,
    Select,
    Table,
    and_,
    case,
    insert,
    literal,
    literal_column,
    select,
    tuple_,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import ReservationState
from cnbrain.ledger.claim import Claim
from cnbrain.storage import link_states
from cnbrain.storage._sql import driver_sql, execute_counted
from cnbrain.storage.clock import moment_of
from cnbrain.storage.database import Dialect, dialect_of
from cnbrain.storage.errors import LedgerStoreError
from cnbrain.storage.models import (
    LinkCapacity,
    LinkRecord,
    LinkStateRecord,
    Quota,
    ReservationFlow,
    ReservationFlowLink,
    ReservationLink,
    ReservationRecord,
    SiteAccelerators,
    SiteCapacity,
    SiteRecord,
)
from cnbrain.storage.registry import ACTIVE

REPORTED_DOWN = link_states.DOWN
"""The status `link_status` gives an active link whose operator reported it down."""

SITE_RESOURCES = (("cpu", "cpu_m_"), ("memory", "mem_mib_"), ("storage", "storage_gib_"))
"""(name, column prefix) of what a site capacity row holds, in the order of `Sums.sites`."""

QUOTA_COLUMNS = (
    ("cpu", "used_cpu_m", "limit_cpu_m"),
    ("memory", "used_mem_mib", "limit_mem_mib"),
    ("accelerators", "used_acc_milli", "limit_acc_milli"),
    ("bandwidth", "used_mbps", "limit_mbps"),
    ("active requests", "active_requests", "limit_active_requests"),
)
"""(name, used column, limit column) of a quota row, in the order of `Sums.quotas`."""
_QUOTA_USED = tuple(used for _, used, _ in QUOTA_COLUMNS)


def free(row: str, resource: str = "") -> str:
    """SQL: what capacity row `row` (a table or its alias) has free of `resource` (the prefix
    of its columns: cpu_m_, mem_mib_, storage_gib_, mbps_; none for an accelerator pool).
    The ledger's capacity rule: an amount fits when it is at most cap - used - external."""
    return f"{row}.{resource}cap - {row}.{resource}used - {row}.{resource}external"


def left(row: str, used: str, limit: str) -> str:
    """SQL: what quota row `row` has left under `limit`: limit - used, NULL for no limit."""
    return f"{row}.{limit} - {row}.{used}"


@dataclass(frozen=True, slots=True)
class Sums:
    """What a batch of claims takes, summed: per site (cpu, memory, storage), per accelerator
    pool (site, model), per link (Mbps), per tenant (cpu, memory, accelerators, Mbps,
    requests)."""

    sites: Mapping[str, Sequence[int]]
    pools: Mapping[tuple[str, str], int]
    bandwidth: Mapping[str, int]
    quotas: Mapping[str, Sequence[int]]


FreeCapacity = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]
"""(site id, status, free cpu, memory, storage) per site capacity row, (site id, model, free,
site status) per accelerator pool, (link id, status, free Mbps) per link capacity row."""


class LedgerSql(Protocol):
    """The ledger's statements in one dialect, in one transaction. Every `lock_*` locks its
    rows in key order (`ORDER BY ... FOR UPDATE`) and returns what they have free or left."""

    async def free_capacity(self) -> FreeCapacity: ...

    async def share_lock_links(self, ids: Sequence[str]) -> dict[str, str]:
        """Share-lock the link rows in id order; id -> status, `REPORTED_DOWN` for an
        active link whose operator's last report says down (`link_states`)."""
        ...

    async def share_lock_sites(self, ids: Sequence[str]) -> dict[str, tuple[str, Any]]:
        """Share-lock the site rows in id order; id -> (status, the `node_pools` of its
        document as JSON values, None when it has none)."""
        ...

    async def lock_sites(self, ids: Sequence[str]) -> dict[str, tuple[int, int, int]]: ...

    async def lock_pools(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]: ...

    async def lock_links(self, ids: Sequence[str], now: datetime) -> dict[str, tuple[int, bool]]:
        """link -> what it has free, and whether a flow whose window ends after `now`
        crosses it (`reservation_flows`)."""
        ...

    async def lock_quotas(self, ids: Sequence[str]) -> dict[str, tuple[int | None, ...]]:
        """tenant -> what is left of each of the `QUOTA_COLUMNS` (None: no limit)."""
        ...

    async def take(
        self, sums: Sums, claims: Sequence[Claim], at: datetime
    ) -> tuple[int, int, int, int]:
        """Add `sums` to the `used` columns of rows locked and checked already, and insert
        `claims` as reservations held since `at`, each over its window; the rows changed in
        site capacity, pools, links and quotas."""
        ...


def link_status() -> ColumnElement[str]:
    """A link's status: its row's (`ACTIVE`, or retired), but `REPORTED_DOWN` for an active
    link whose operator's last report says down; over `with_link_states`."""
    state = _LINK_STATES.c.state
    return case(
        (and_(_LINKS.c.status == ACTIVE, state == REPORTED_DOWN), literal(REPORTED_DOWN)),
        else_=_LINKS.c.status,
    )


def with_link_states(joined: FromClause) -> Join:
    """`joined` (a FROM clause with `links`) left-joined to the links' reported states."""
    return joined.outerjoin(_LINK_STATES, _LINK_STATES.c.link_id == _LINKS.c.id)


def ledger_sql(session: AsyncSession) -> LedgerSql:
    """The writer of `session`'s dialect."""
    return _WRITERS[dialect_of(session)](session)


async def give_back(session: AsyncSession, sums: Sums) -> None:
    """Subtract `sums` from the `used` columns: one UPDATE per table (site capacity,
    accelerator pools, links, quotas), each locking its rows in key order first. The same
    statements in every dialect."""
    c, a, lc, q = _SITE_CAPACITY.c, _ACCELERATORS.c, _LINK_CAPACITY.c, _QUOTAS.c
    if sums.sites:
        ids = sorted(sums.sites)
        per_row = [_case(c.site_id, {k: v[i] for k, v in sums.sites.items()}) for i in range(3)]
        used = [c[f"{prefix}used"] for _, prefix in SITE_RESOURCES]
        await session.execute(
            update(_SITE_CAPACITY)
            .where(c.site_id.in_(_locked(c.site_id, c.site_id.in_(ids))))
            .values({u.key: u - n for u, n in zip(used, per_row, strict=True)})
        )
    if sums.pools:
        keys = sorted(sums.pools)
        pool = tuple_(a.site_id, a.model)
        locked = (
            select(a.site_id, a.model)
            .where(pool.in_(keys))
            .order_by(a.site_id, a.model)
            .with_for_update()
        )
        await session.execute(
            update(_ACCELERATORS).where(pool.in_(locked)).values(used=a.used - _per_pool(sums))
        )
    if sums.bandwidth:
        ids = sorted(sums.bandwidth)
        await session.execute(
            update(_LINK_CAPACITY)
            .where(lc.link_id.in_(_locked(lc.link_id, lc.link_id.in_(ids))))
            .values(mbps_used=lc.mbps_used - _case(lc.link_id, sums.bandwidth))
        )
    if sums.quotas:
        ids = sorted(sums.quotas)
        per_tenant = _per_tenant(sums)
        await session.execute(
            update(_QUOTAS)
            .where(q.tenant_id.in_(_locked(q.tenant_id, q.tenant_id.in_(ids))))
            .values(
                {
                    used: q[used] - n
                    for (_, used, _), n in zip(QUOTA_COLUMNS, per_tenant, strict=True)
                }
            )
        )


class _PortableSql:
    """`LedgerSql` in SQLAlchemy Core (SQLite): the amounts per row as CASE expressions."""

    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def free_capacity(self) -> FreeCapacity:
        c, a, lc = _SITE_CAPACITY.c, _ACCELERATORS.c, _LINK_CAPACITY.c
        sites = await self._session.execute(
            select(c.site_id, _SITES.c.status, *_site_free()).join(_SITES, _SITES.c.id == c.site_id)
        )
        pools = await self._session.execute(
            select(a.site_id, a.model, _sql(free("site_accelerators")), _SITES.c.status).join(
                _SITES, _SITES.c.id == a.site_id
            )
        )
        links = await self._session.execute(
            select(lc.link_id, link_status(), _sql(free("link_capacity", "mbps_"))).select_from(
                with_link_states(_LINK_CAPACITY.join(_LINKS, _LINKS.c.id == lc.link_id))
            )
        )
        return (
            [tuple(r) for r in sites.all()],
            [tuple(r) for r in pools.all()],
            [tuple(r) for r in links.all()],
        )

    async def share_lock_links(self, ids: Sequence[str]) -> dict[str, str]:
        c = _LINKS.c
        rows = await self._session.execute(
            select(c.id, link_status())
            .select_from(with_link_states(_LINKS))
            .where(c.id.in_(ids))
            .order_by(c.id)
            .with_for_update(read=True, of=_LINKS)
        )
        return dict(rows.all())

    async def share_lock_sites(self, ids: Sequence[str]) -> dict[str, tuple[str, Any]]:
        c = _SITES.c
        rows = await self._session.execute(
            select(c.id, c.status, c.document["node_pools"])
            .where(c.id.in_(ids))
            .order_by(c.id)
            .with_for_update(read=True)
        )
        return {site: (status, pools) for site, status, pools in rows}

    async def lock_sites(self, ids: Sequence[str]) -> dict[str, tuple[int, int, int]]:
        c = _SITE_CAPACITY.c
        rows = await self._session.execute(
            select(c.site_id, *_site_free())
            .where(c.site_id.in_(ids))
            .order_by(c.site_id)
            .with_for_update()
        )
        return {site: (cpu, mem, storage) for site, cpu, mem, storage in rows}

    async def lock_pools(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        a = _ACCELERATORS.c
        rows = await self._session.execute(
            select(a.site_id, a.model, _sql(free("site_accelerators")))
            .where(tuple_(a.site_id, a.model).in_(keys))
            .order_by(a.site_id, a.model)
            .with_for_update()
        )
        return {(site, model): n for site, model, n in rows}

    async def lock_links(self, ids: Sequence[str], now: datetime) -> dict[str, tuple[int, bool]]:
        c, fl, f = _LINK_CAPACITY.c, _FLOW_LINKS.c, _FLOWS.c
        flowed = (
            select(fl.flow_id)
            .join(_FLOWS, f.id == fl.flow_id)
            .where(fl.link_id == c.link_id, f.end_at > now)
            .exists()
        )
        rows = await self._session.execute(
            select(c.link_id, _sql(free("link_capacity", "mbps_")), flowed)
            .where(c.link_id.in_(ids))
            .order_by(c.link_id)
            .with_for_update()
        )
        return {link: (free_mbps, bool(crossed)) for link, free_mbps, crossed in rows}

    async def lock_quotas(self, ids: Sequence[str]) -> dict[str, tuple[int | None, ...]]:
        q = _QUOTAS.c
        rows = await self._session.execute(
            select(q.tenant_id, *(_sql(left("quotas", u, limit)) for _, u, limit in QUOTA_COLUMNS))
            .where(q.tenant_id.in_(ids))
            .order_by(q.tenant_id)
            .with_for_update()
        )
        return {row[0]: tuple(row[1:]) for row in rows}

    async def take(
        self, sums: Sums, claims: Sequence[Claim], at: datetime
    ) -> tuple[int, int, int, int]:
        c, a, lc, q = _SITE_CAPACITY.c, _ACCELERATORS.c, _LINK_CAPACITY.c, _QUOTAS.c
        changed = [0, 0, 0, 0]
        if sums.sites:
            per_row = [_case(c.site_id, {k: v[i] for k, v in sums.sites.items()}) for i in range(3)]
            used = [c[f"{prefix}used"] for _, prefix in SITE_RESOURCES]
            changed[0] = await self._update(
                update(_SITE_CAPACITY)
                .where(c.site_id.in_(list(sums.sites)))
                .values({u.key: u + n for u, n in zip(used, per_row, strict=True)})
            )
        if sums.pools:
            changed[1] = await self._update(
                update(_ACCELERATORS)
                .where(tuple_(a.site_id, a.model).in_(list(sums.pools)))
                .values(used=a.used + _per_pool(sums))
            )
        if sums.bandwidth:
            changed[2] = await self._update(
                update(_LINK_CAPACITY)
                .where(lc.link_id.in_(list(sums.bandwidth)))
                .values(mbps_used=lc.mbps_used + _case(lc.link_id, sums.bandwidth))
            )
        if sums.quotas:
            per_tenant = _per_tenant(sums)
            changed[3] = await self._update(
                update(_QUOTAS)
                .where(q.tenant_id.in_(list(sums.quotas)))
                .values({u: q[u] + n for u, n in zip(_QUOTA_USED, per_tenant, strict=True)})
            )
        if claims:
            await self._insert_reservations(claims, at)
        return changed[0], changed[1], changed[2], changed[3]

    async def _insert_reservations(self, claims: Sequence[Claim], at: datetime) -> None:
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
        links = link_rows(claims)
        if links:
            await self._session.execute(insert(_RESERVATION_LINKS), links)

    async def _update(self, statement: Any) -> int:
        return await execute_counted(self._session, statement)


class _PostgresSql:
    """`LedgerSql` on PostgreSQL as plain SQL through the driver, with the amounts as arrays
    (`unnest`): fixed statements whatever the batch, prepared once per connection, without
    SQLAlchemy's compilation (about a sixth of the CPU time of the Core statements)."""

    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def _sql(self, statement: str, *parameters: Any) -> Any:
        return await driver_sql(self._session, statement, *parameters)

    async def free_capacity(self) -> FreeCapacity:
        rows: Sequence[Any] = (await self._sql(_CAPACITY_ROWS)).all()
        return (
            [(r[1], r[3], r[4], r[5], r[6]) for r in rows if r[0] == 0],
            [(r[1], r[2], r[4], r[3]) for r in rows if r[0] == 1],
            [(r[1], r[3], r[4]) for r in rows if r[0] == 2],
        )

    async def share_lock_links(self, ids: Sequence[str]) -> dict[str, str]:
        rows = await self._sql(
            f"SELECT l.id, {_LINK_STATUS_SQL}"
            " FROM links AS l LEFT JOIN link_states AS s ON s.link_id = l.id"
            " WHERE l.id = ANY($1::text[]) ORDER BY l.id FOR SHARE OF l",
            list(ids),
        )
        return dict(rows.all())

    async def share_lock_sites(self, ids: Sequence[str]) -> dict[str, tuple[str, Any]]:
        rows = await self._sql(
            "SELECT id, status, document->'node_pools' FROM sites WHERE id = ANY($1::text[])"
            " ORDER BY id FOR SHARE",
            list(ids),
        )
        return {
            site: (status, json.loads(pools) if isinstance(pools, str) else pools)
            for site, status, pools in rows
        }

    async def lock_sites(self, ids: Sequence[str]) -> dict[str, tuple[int, int, int]]:
        rows = await self._sql(_LOCK_SITES, list(ids))
        return {site: (cpu, mem, storage) for site, cpu, mem, storage in rows}

    async def lock_pools(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        rows = await self._sql(
            f"SELECT a.site_id, a.model, {free('a')} FROM site_accelerators AS a"
            " JOIN unnest($1::text[], $2::text[]) AS k(site_id, model)"
            " ON a.site_id = k.site_id AND a.model = k.model"
            " ORDER BY a.site_id, a.model FOR UPDATE OF a",
            [site for site, _ in keys],
            [model for _, model in keys],
        )
        return {(site, model): n for site, model, n in rows}

    async def lock_links(self, ids: Sequence[str], now: datetime) -> dict[str, tuple[int, bool]]:
        rows = await self._sql(_LOCK_LINKS, list(ids), now)
        return {link: (free_mbps, bool(crossed)) for link, free_mbps, crossed in rows.all()}

    async def lock_quotas(self, ids: Sequence[str]) -> dict[str, tuple[int | None, ...]]:
        rows = await self._sql(_LOCK_QUOTAS, list(ids))
        return {row[0]: tuple(row[1:]) for row in rows}

    async def take(
        self, sums: Sums, claims: Sequence[Claim], at: datetime
    ) -> tuple[int, int, int, int]:
        """One statement: an UPDATE per table and the INSERTs, as data-modifying CTEs (the
        rows are locked already, so their order does not matter any more)."""
        site_ids, pools, links, tenants = (
            list(sums.sites),
            list(sums.pools),
            list(sums.bandwidth),
            list(sums.quotas),
        )
        held = [(c.reservation_id, link) for c in claims for link in sorted(c.link_ids)]
        row = (
            await self._sql(
                _TAKE,
                site_ids,
                *([sums.sites[k][i] for k in site_ids] for i in range(3)),
                [site for site, _ in pools],
                [model for _, model in pools],
                [sums.pools[k] for k in pools],
                links,
                [sums.bandwidth[k] for k in links],
                tenants,
                *([sums.quotas[k][i] for k in tenants] for i in range(len(QUOTA_COLUMNS))),
                [c.reservation_id for c in claims],
                [c.request_id for c in claims],
                [c.tenant_id for c in claims],
                [c.site_id for c in claims],
                [c.cpu_m for c in claims],
                [c.mem_mib for c in claims],
                [c.storage_gib for c in claims],
                [c.accelerator_model for c in claims],
                [c.accelerator_milli for c in claims],
                [c.mbps for c in claims],
                ReservationState.HELD,
                at,
                [rid for rid, _ in held],
                [link for _, link in held],
                [moment_of(c.window.start) for c in claims],
                [moment_of(c.window.end) for c in claims],
            )
        ).one()
        if (row[4], row[5]) != (len(claims), len(held)):
            raise LedgerStoreError("not every reservation was stored")
        return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def amount_columns(claim: Claim) -> dict[str, object]:
    """What `claim` takes and over which window, as the columns that reservations and
    cross-brain parts store."""
    return {
        "request_id": claim.request_id,
        "tenant_id": claim.tenant_id,
        "site_id": claim.site_id,
        "cpu_m": claim.cpu_m,
        "mem_mib": claim.mem_mib,
        "storage_gib": claim.storage_gib,
        "accelerator_model": claim.accelerator_model,
        "accelerator_milli": claim.accelerator_milli,
        "mbps": claim.mbps,
        "start_at": moment_of(claim.window.start),
        "end_at": moment_of(claim.window.end),
    }


def link_rows(claims: Sequence[Claim]) -> list[dict[str, str]]:
    """The rows that name the links each of `claims` crosses, as both link tables store them."""
    return [
        {"reservation_id": claim.reservation_id, "link_id": link}
        for claim in claims
        for link in sorted(claim.link_ids)
    ]


_WRITERS: Mapping[Dialect, Callable[[AsyncSession], LedgerSql]] = {
    Dialect.POSTGRESQL: _PostgresSql,
    Dialect.SQLITE: _PortableSql,
}

_RESERVATIONS = cast("Table", ReservationRecord.__table__)
_RESERVATION_LINKS = cast("Table", ReservationLink.__table__)
_SITES = cast("Table", SiteRecord.__table__)
_LINKS = cast("Table", LinkRecord.__table__)
_LINK_STATES = cast("Table", LinkStateRecord.__table__)
_SITE_CAPACITY = cast("Table", SiteCapacity.__table__)
_ACCELERATORS = cast("Table", SiteAccelerators.__table__)
_LINK_CAPACITY = cast("Table", LinkCapacity.__table__)
_QUOTAS = cast("Table", Quota.__table__)
_FLOWS = cast("Table", ReservationFlow.__table__)
_FLOW_LINKS = cast("Table", ReservationFlowLink.__table__)


def _sql(expression: str) -> ColumnElement[int]:
    return literal_column(expression, BigInteger)


def _site_free() -> list[ColumnElement[int]]:
    return [_sql(free("site_capacity", prefix)) for _, prefix in SITE_RESOURCES]


def _case(key: Any, amounts: Mapping[Any, int]) -> ColumnElement[int]:
    """`amounts[key]` of each row, as SQL: CASE key WHEN k1 THEN a1 ... END."""
    return case({k: literal(v, BigInteger) for k, v in amounts.items()}, value=key)


def _per_pool(sums: Sums) -> ColumnElement[int]:
    a = _ACCELERATORS.c
    return case(
        *(
            (and_(a.site_id == site, a.model == model), literal(n, BigInteger))
            for (site, model), n in sums.pools.items()
        )
    )


def _per_tenant(sums: Sums) -> list[ColumnElement[int]]:
    q = _QUOTAS.c
    return [
        _case(q.tenant_id, {k: v[i] for k, v in sums.quotas.items()})
        for i in range(len(QUOTA_COLUMNS))
    ]


def _locked(key: Any, where: ColumnElement[bool]) -> Select[Any]:
    """The keys of the rows of `key`'s table that match `where`, locked in key order."""
    return select(key).where(where).order_by(key).with_for_update()


_LINK_STATUS_SQL = (
    f"CASE WHEN l.status = '{ACTIVE}' AND s.state = '{REPORTED_DOWN}' THEN '{REPORTED_DOWN}'"
    " ELSE l.status END"
)
"""`link_status` in SQL, over `links AS l LEFT JOIN link_states AS s`."""

_CAPACITY_ROWS = (
    f"SELECT 0, c.site_id, NULL::text, s.status, {free('c', 'cpu_m_')},"
    f" {free('c', 'mem_mib_')}, {free('c', 'storage_gib_')}"
    " FROM site_capacity AS c JOIN sites AS s ON s.id = c.site_id"
    f" UNION ALL SELECT 1, a.site_id, a.model, s.status, {free('a')}, 0, 0"
    " FROM site_accelerators AS a JOIN sites AS s ON s.id = a.site_id"
    f" UNION ALL SELECT 2, c.link_id, NULL, {_LINK_STATUS_SQL}, {free('c', 'mbps_')}, 0, 0"
    " FROM link_capacity AS c JOIN links AS l ON l.id = c.link_id"
    " LEFT JOIN link_states AS s ON s.link_id = l.id"
)
"""Free capacity of every site, accelerator pool and link, with its status (a link's as
`link_status` gives it), in one query: (kind 0/1/2, site or link id, model, status, free
amounts)."""

_LOCK_SITES = (
    "SELECT c.site_id, "
    + ", ".join(free("c", prefix) for _, prefix in SITE_RESOURCES)
    + " FROM site_capacity AS c WHERE c.site_id = ANY($1::text[]) ORDER BY c.site_id FOR UPDATE"
)

_LOCK_LINKS = (
    f"SELECT c.link_id, {free('c', 'mbps_')}, EXISTS (SELECT 1 FROM reservation_flow_links AS fl"
    " JOIN reservation_flows AS f ON f.id = fl.flow_id"
    " WHERE fl.link_id = c.link_id AND f.end_at > $2)"
    " FROM link_capacity AS c WHERE c.link_id = ANY($1::text[]) ORDER BY c.link_id FOR UPDATE"
)
_LOCK_QUOTAS = (
    "SELECT q.tenant_id, "
    + ", ".join(left("q", used, limit) for _, used, limit in QUOTA_COLUMNS)
    + " FROM quotas AS q WHERE q.tenant_id = ANY($1::text[]) ORDER BY q.tenant_id FOR UPDATE"
)

_TAKE = (
    "WITH s AS (UPDATE site_capacity AS c SET cpu_m_used = c.cpu_m_used + v.cpu,"
    " mem_mib_used = c.mem_mib_used + v.mem, storage_gib_used = c.storage_gib_used + v.storage"
    " FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])"
    " AS v(site_id, cpu, mem, storage) WHERE c.site_id = v.site_id RETURNING 1),"
    " a AS (UPDATE site_accelerators AS a SET used = a.used + v.n"
    " FROM unnest($5::text[], $6::text[], $7::bigint[]) AS v(site_id, model, n)"
    " WHERE a.site_id = v.site_id AND a.model = v.model RETURNING 1),"
    " l AS (UPDATE link_capacity AS c SET mbps_used = c.mbps_used + v.mbps"
    " FROM unnest($8::text[], $9::bigint[]) AS v(link_id, mbps)"
    " WHERE c.link_id = v.link_id RETURNING 1),"
    " q AS (UPDATE quotas AS q SET "
    + ", ".join(f"{used} = q.{used} + v.a{i}" for i, used in enumerate(_QUOTA_USED))
    + " FROM unnest($10::text[], $11::bigint[], $12::bigint[], $13::bigint[],"
    " $14::bigint[], $15::bigint[]) AS v(tenant_id, a0, a1, a2, a3, a4)"
    " WHERE q.tenant_id = v.tenant_id RETURNING 1),"
    " r AS (INSERT INTO reservations (id, request_id, tenant_id, site_id, cpu_m,"
    " mem_mib, storage_gib, accelerator_model, accelerator_milli, mbps, start_at, end_at,"
    " state, created_at) SELECT v.*, $26, $27 FROM unnest($16::text[], $17::text[],"
    " $18::text[], $19::text[], $20::bigint[], $21::bigint[], $22::bigint[],"
    " $23::text[], $24::bigint[], $25::bigint[], $30::timestamptz[], $31::timestamptz[])"
    " AS v RETURNING 1),"
    " rl AS (INSERT INTO reservation_links (reservation_id, link_id)"
    " SELECT * FROM unnest($28::text[], $29::text[]) RETURNING 1)"
    " SELECT (SELECT count(*) FROM s), (SELECT count(*) FROM a),"
    " (SELECT count(*) FROM l), (SELECT count(*) FROM q),"
    " (SELECT count(*) FROM r), (SELECT count(*) FROM rl)"
)
"""The updates of a batch and the inserts of its reservations, as one statement."""
