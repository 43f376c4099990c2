"""Metering: the usage records of jobs, and per-tenant reports, for a period.

A record is what one attempt of a job used, from its scheduler's accounting, with its cost at
the site's prices; it belongs to the period in which the attempt ended. Tenant users and
admins see their own tenant's; staff see every tenant's, or the one they name.
"""

from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.errors import Invalid, NotFound
from cnbrain.regional.schemas import (
    UsagePage,
    UsageReport,
    UsageReportRow,
    UsageTotals,
    UsageView,
)
from cnbrain.regional.security import Principal
from cnbrain.storage import tenants, usage

DEFAULT_PERIOD = timedelta(days=30)
"""How far a period reaches back from its end when its start is not given."""


class UsageReports:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def records(
        self,
        principal: Principal,
        *,
        start: datetime | None,
        end: datetime | None,
        tenant: str | None,
        limit: int,
        cursor: str | None,
    ) -> UsagePage:
        """One page of the records of the period (see `period`) from `cursor` on, with the
        period's totals. A tenant role sees its tenant's (naming another `tenant` is
        NotFound); staff the named `tenant`'s (NotFound when it does not exist), or, with
        None, every tenant's. Raises Invalid (field `from`: an empty period; `cursor`: one not
        issued here) or NotFound."""
        begin, finish = period(start, end)
        async with self._sessions() as session:
            scope = await self._scope(session, principal, tenant)
            try:
                found, next_cursor = await usage.page(
                    session, tenant_id=scope, start=begin, end=finish, limit=limit, cursor=cursor
                )
            except usage.BadCursor:
                raise Invalid("not a cursor this brain issued", field="cursor") from None
            totals = await usage.totals(session, tenant_id=scope, start=begin, end=finish)
        return UsagePage(
            tenant=scope,
            start=begin,
            end=finish,
            totals=_totals(totals),
            items=[_view(r) for r in found],
            next_cursor=next_cursor,
        )

    async def report(
        self,
        principal: Principal,
        *,
        start: datetime | None,
        end: datetime | None,
        tenant: str | None,
    ) -> UsageReport:
        """The sums of the period (see `period`) per tenant, site and kind of scheduler, in
        that order, and each tenant's totals; of the tenants `records` would show. Raises
        Invalid (field `from`: an empty period) or NotFound."""
        begin, finish = period(start, end)
        async with self._sessions() as session:
            scope = await self._scope(session, principal, tenant)
            rows = await usage.report(session, tenant_id=scope, start=begin, end=finish)
        per_tenant: dict[str, list[usage.ReportRow]] = {}
        for row in rows:
            per_tenant.setdefault(row.tenant_id, []).append(row)
        return UsageReport(
            start=begin,
            end=finish,
            rows=[
                UsageReportRow(
                    tenant=row.tenant_id,
                    site=row.site_id,
                    simulated=row.simulated,
                    **_totals(row).model_dump(),
                )
                for row in rows
            ],
            tenants={tenant_id: _sum(group) for tenant_id, group in per_tenant.items()},
        )

    async def _scope(
        self, session: AsyncSession, principal: Principal, tenant: str | None
    ) -> str | None:
        """The tenant the caller's query is about: a tenant role's own (naming another one is
        NotFound); for staff the one named (NotFound when it does not exist), or None, every
        tenant."""
        if not principal.is_staff:
            if tenant is not None and tenant != principal.tenant_id:
                raise _no_tenant(tenant)
            return principal.tenant_id
        if tenant is not None and await tenants.get_tenant(session, tenant_id=tenant) is None:
            raise _no_tenant(tenant)
        return tenant


def period(start: datetime | None, end: datetime | None) -> tuple[datetime, datetime]:
    """The period [start, end) in UTC (a moment without a zone is taken as UTC); `end`
    defaults to now, `start` to `DEFAULT_PERIOD` before `end`. Invalid (field `from`) when
    the period is empty."""
    end = _utc(end) if end is not None else datetime.now(UTC)
    start = _utc(start) if start is not None else end - DEFAULT_PERIOD
    if start >= end:
        raise Invalid(
            f"the period is empty: from {start.isoformat()} is not before to", field="from"
        )
    return start, end


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _no_tenant(tenant_id: str) -> NotFound:
    return NotFound(f"tenant {tenant_id!r} does not exist")


def _view(record: usage.Usage) -> UsageView:
    return UsageView(
        id=record.id,
        tenant=record.tenant_id,
        request=record.request_id,
        attempt=record.attempt,
        site=record.site_id,
        backend_job_id=record.backend_job_id,
        simulated=record.simulated,
        started_at=_utc(record.started_at),
        ended_at=_utc(record.ended_at),
        elapsed_s=record.elapsed_s,
        cpus=record.cpus,
        memory_mib=record.memory_mib,
        gpus=record.gpus,
        accelerator_model=record.accelerator_model,
        bandwidth_gbps=record.bandwidth_gbps,
        cpu_core_hours=record.cpu_core_hours,
        memory_gib_hours=record.memory_gib_hours,
        accelerator_hours=record.accelerator_hours,
        compute_cost_cny=record.compute_cost_cny,
        network_cost_cny=record.network_cost_cny,
        cost_cny=record.cost_cny,
        source=record.source,
    )


def _totals(totals: usage.Totals) -> UsageTotals:
    return UsageTotals(
        records=totals.records,
        elapsed_s=totals.elapsed_s,
        cpu_core_hours=totals.cpu_core_hours,
        memory_gib_hours=totals.memory_gib_hours,
        accelerator_hours=totals.accelerator_hours,
        compute_cost_cny=totals.compute_cost_cny,
        network_cost_cny=totals.network_cost_cny,
        cost_cny=totals.cost_cny,
    )


def _sum(rows: list[usage.ReportRow]) -> UsageTotals:
    return UsageTotals(
        records=sum(r.records for r in rows),
        **{
            name: sum(getattr(r, name) for r in rows)
            for name in UsageTotals.model_fields
            if name != "records"
        },
    )
