"""Usage records: what each attempt of a job used, and reports over a period.

A record belongs to the period in which its attempt ended (`from` inclusive, `to` exclusive).
Tenant scoping as in `cnbrain.storage.requests`: `tenant_id` None sees every tenant.
Functions work inside the caller's transaction and never commit.
"""

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.storage._sql import check_limit, decode_keyset, encode_keyset
from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.errors import BadCursor
from cnbrain.storage.models import UsageRecord

__all__ = [
    "BadCursor",
    "Measures",
    "NewUsage",
    "ReportRow",
    "Totals",
    "Usage",
    "insert",
    "page",
    "report",
    "totals",
]

_USAGE = cast("Table", UsageRecord.__table__)


@dataclass(frozen=True, slots=True)
class Measures:
    """What one attempt used, from its scheduler's accounting, and its costs at the site's
    prices (see `UsageRecord` for the meaning of each field)."""

    started_at: datetime
    ended_at: datetime
    elapsed_s: float
    cpus: int
    memory_mib: int
    gpus: int
    accelerator_model: str | None
    bandwidth_gbps: float
    cpu_core_hours: float
    memory_gib_hours: float
    accelerator_hours: float
    compute_cost_cny: float
    network_cost_cny: float


@dataclass(frozen=True, slots=True)
class NewUsage(Measures):
    """One attempt's usage, to store (see `UsageRecord` for the meaning of each field)."""

    tenant_id: str
    request_id: str
    attempt: int
    site_id: str
    backend_job_id: str
    source: str
    simulated: bool

    @property
    def cost_cny(self) -> float:
        return self.compute_cost_cny + self.network_cost_cny


@dataclass(frozen=True, slots=True)
class Usage(Measures):
    """A stored usage record (see `UsageRecord` for the meaning of each field); `id` orders
    records that ended at the same time."""

    id: int
    tenant_id: str
    request_id: str
    attempt: int | None
    site_id: str
    backend_job_id: str | None
    cost_cny: float
    source: str | None
    simulated: bool
    recorded_at: datetime | None


_USAGE_FIELDS = tuple(f.name for f in fields(Usage))


def _usage(record: UsageRecord) -> Usage:
    return Usage(**{name: getattr(record, name) for name in _USAGE_FIELDS})


@dataclass(frozen=True, slots=True)
class Totals:
    records: int
    elapsed_s: float
    cpu_core_hours: float
    memory_gib_hours: float
    accelerator_hours: float
    compute_cost_cny: float
    network_cost_cny: float
    cost_cny: float


_TOTALS = tuple(f.name for f in fields(Totals))


@dataclass(frozen=True, slots=True)
class ReportRow(Totals):
    """The totals of one tenant on one site, from real or from simulated schedulers."""

    tenant_id: str
    site_id: str
    simulated: bool


async def insert(session: AsyncSession, usage: NewUsage) -> bool:
    """Store the record; False (nothing stored) when the attempt has one already."""
    values: dict[str, Any] = {
        name: getattr(usage, name) for name in NewUsage.__dataclass_fields__
    } | {"cost_cny": usage.cost_cny, "recorded_at": utcnow()}
    statement = (
        insert_on_conflict(session, _USAGE)
        .values(**values)
        .on_conflict_do_nothing(index_elements=[_USAGE.c.request_id, _USAGE.c.attempt])
        .returning(_USAGE.c.id)
    )
    return (await session.execute(statement)).first() is not None


def _period(tenant_id: str | None, start: datetime, end: datetime) -> list[Any]:
    u = UsageRecord
    condition: list[Any] = [u.ended_at >= start, u.ended_at < end]
    if tenant_id is not None:
        condition.append(u.tenant_id == tenant_id)
    return condition


async def page(
    session: AsyncSession,
    *,
    tenant_id: str | None,
    start: datetime,
    end: datetime,
    limit: int = 100,
    cursor: str | None = None,
) -> tuple[list[Usage], str | None]:
    """One page of the records of the period, oldest end first, and the next page's cursor
    (None at the end). Raises BadCursor for a cursor not made here."""
    check_limit(limit)
    u = UsageRecord
    query = select(u).where(*_period(tenant_id, start, end))
    if cursor is not None:
        after_end, after_id = decode_keyset(cursor, int)
        query = query.where(
            or_(u.ended_at > after_end, and_(u.ended_at == after_end, u.id > after_id))
        )
    rows = [
        _usage(record)
        for record in await session.scalars(query.order_by(u.ended_at, u.id).limit(limit + 1))
    ]
    if len(rows) <= limit:
        return rows, None
    last = rows[limit - 1]
    return rows[:limit], encode_keyset(last.ended_at, last.id)


def _sums() -> list[Any]:
    """The columns of `Totals`: the count of records, then the sum of each measure."""
    u = UsageRecord
    return [
        func.count(u.id),
        *(func.coalesce(func.sum(getattr(u, name)), 0.0) for name in _TOTALS[1:]),
    ]


def _totals(values: Any) -> dict[str, Any]:
    """The fields of `Totals` from the values of `_sums`."""
    return {
        name: int(value) if name == "records" else float(value)
        for name, value in zip(_TOTALS, values, strict=True)
    }


async def totals(
    session: AsyncSession, *, tenant_id: str | None, start: datetime, end: datetime
) -> Totals:
    """The sums over every record of the period."""
    row = (await session.execute(select(*_sums()).where(*_period(tenant_id, start, end)))).one()
    return Totals(**_totals(row))


async def report(
    session: AsyncSession, *, tenant_id: str | None, start: datetime, end: datetime
) -> list[ReportRow]:
    """Per tenant, site and kind of scheduler (real or simulated): the sums over the period,
    ordered by tenant and site."""
    u = UsageRecord
    rows = await session.execute(
        select(u.tenant_id, u.site_id, u.simulated, *_sums())
        .where(*_period(tenant_id, start, end))
        .group_by(u.tenant_id, u.site_id, u.simulated)
        .order_by(u.tenant_id, u.site_id, u.simulated)
    )
    return [
        ReportRow(tenant_id=tenant, site_id=site, simulated=bool(simulated), **_totals(rest))
        for tenant, site, simulated, *rest in rows.all()
    ]
