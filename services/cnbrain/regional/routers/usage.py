"""Metering: usage records of jobs, and per-tenant reports for a period (JSON or CSV).

A record is what one attempt of a job used, from its scheduler's accounting, with its cost at
the site's prices; it belongs to the period in which the attempt ended. Tenant users and
admins see their own tenant's; staff see every tenant's, or the one they name.
"""

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response

from cnbrain.regional.deps import BrainDep, PrincipalDep
from cnbrain.regional.problems import invalid, not_found, responses
from cnbrain.regional.schemas import (
    UsagePage,
    UsageReport,
    UsageReportRow,
    UsageTotals,
    UsageView,
)
from cnbrain.regional.security import Principal
from cnbrain.storage import tenants, usage

router = APIRouter(prefix="/v1", tags=["usage"])

DEFAULT_PERIOD = timedelta(days=30)
CSV_COLUMNS = (
    "tenant",
    "site",
    "simulated",
    "records",
    "elapsed_s",
    "cpu_core_hours",
    "memory_gib_hours",
    "accelerator_hours",
    "compute_cost_cny",
    "network_cost_cny",
    "cost_cny",
)
ERRORS = responses(
    {
        401: "No valid API key.",
        404: "No such tenant for this caller.",
        422: "A malformed period or parameter; `errors` names it.",
    }
)

From = Annotated[
    datetime | None,
    Query(
        alias="from",
        description="Start of the period (ISO 8601, inclusive; UTC when no zone is given). "
        "Default: 30 days before `to`.",
        examples=["2026-11-01T00:00:00Z"],
    ),
]
To = Annotated[
    datetime | None,
    Query(
        description="End of the period (exclusive). Default: now.",
        examples=["2026-12-01T00:00:00Z"],
    ),
]
TenantParam = Annotated[
    str | None,
    Query(description="Staff: one tenant (default: every tenant). Tenants: their own, or nothing."),
]


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def period(start: datetime | None, end: datetime | None) -> tuple[datetime, datetime]:
    """The period [start, end) in UTC, with the defaults; 422 naming `from` when it is empty."""
    end = _utc(end) if end is not None else datetime.now(UTC)
    start = _utc(start) if start is not None else end - DEFAULT_PERIOD
    if start >= end:
        raise invalid("from", f"the period is empty: from {start.isoformat()} is not before to")
    return start, end


async def _scope(brain: BrainDep, principal: Principal, tenant: str | None) -> str | None:
    """The tenant the caller's query is about (None: every tenant, for staff); 404 for a
    tenant the caller may not see, or that does not exist."""
    if not principal.is_staff:
        if tenant is not None and tenant != principal.tenant_id:
            raise not_found("tenant", tenant)
        return principal.tenant_id
    if tenant is not None:
        async with brain.sessions() as session:
            if await tenants.get_tenant(session, tenant_id=tenant) is None:
                raise not_found("tenant", tenant)
    return tenant


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


@router.get(
    "/usage",
    response_model=UsagePage,
    responses=ERRORS,
    summary="Usage records of jobs that ended in a period, with the period's totals",
)
async def list_usage(
    brain: BrainDep,
    principal: PrincipalDep,
    start: From = None,
    to: To = None,
    tenant: TenantParam = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[
        str | None, Query(description="From the previous page's next_cursor.")
    ] = None,
) -> UsagePage:
    begin, end = period(start, to)
    scope = await _scope(brain, principal, tenant)
    async with brain.sessions() as session:
        try:
            records, next_cursor = await usage.page(
                session, tenant_id=scope, start=begin, end=end, limit=limit, cursor=cursor
            )
        except usage.BadCursor:
            raise invalid("cursor", "not a cursor this brain issued") from None
        totals = await usage.totals(session, tenant_id=scope, start=begin, end=end)
    return UsagePage(
        tenant=scope,
        start=begin,
        end=end,
        totals=_totals(totals),
        items=[_view(r) for r in records],
        next_cursor=next_cursor,
    )


@router.get(
    "/usage/report",
    response_model=UsageReport,
    responses={
        **ERRORS,
        200: {
            "description": "The report: JSON, or CSV with `format=csv` (one line per row).",
            "content": {
                "text/csv": {
                    "example": ",".join(CSV_COLUMNS)
                    + "\nacme-ai,BB-hub,false,3,5400.0,12.0,48.0,0.0,0.72,0.06,0.78\n"
                }
            },
        },
    },
    summary="Per-tenant usage report for a period, by site (JSON or CSV)",
)
async def usage_report(
    brain: BrainDep,
    principal: PrincipalDep,
    start: From = None,
    to: To = None,
    tenant: TenantParam = None,
    format: Annotated[Literal["json", "csv"], Query(description="json (default) or csv.")] = "json",
) -> UsageReport | Response:
    begin, end = period(start, to)
    scope = await _scope(brain, principal, tenant)
    async with brain.sessions() as session:
        rows = await usage.report(session, tenant_id=scope, start=begin, end=end)
    if format == "csv":
        return _csv(rows, begin, end)
    per_tenant: dict[str, list[usage.ReportRow]] = {}
    for row in rows:
        per_tenant.setdefault(row.tenant_id, []).append(row)
    return UsageReport(
        start=begin,
        end=end,
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


def _sum(rows: list[usage.ReportRow]) -> UsageTotals:
    return UsageTotals(
        records=sum(r.records for r in rows),
        **{
            name: sum(getattr(r, name) for r in rows)
            for name in UsageTotals.model_fields
            if name != "records"
        },
    )


def _csv(rows: list[usage.ReportRow], begin: datetime, end: datetime) -> Response:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        writer.writerow(
            [
                row.tenant_id,
                row.site_id,
                "true" if row.simulated else "false",
                row.records,
                *(repr(round(getattr(row, name), 6)) for name in CSV_COLUMNS[4:]),
            ]
        )
    name = f"usage-{begin:%Y%m%dT%H%M%SZ}-{end:%Y%m%dT%H%M%SZ}.csv"
    return Response(
        out.getvalue(),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )
