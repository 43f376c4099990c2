"""Metering: usage records of jobs, and per-tenant reports for a period (JSON or CSV).

What a record is and who sees which is said by `cnbrain.regional.use_cases.usage_reports`.
In a federation, both are the whole federation's (`regional.federated_reads`).
"""

import csv
import io
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response

from cnbrain.regional.deps import AdminUseCasesDep, FederatedReadsDep, PrincipalDep
from cnbrain.regional.problems import responses
from cnbrain.regional.schemas import UsagePage, UsageReport

router = APIRouter(prefix="/v1", tags=["usage"])

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
        503: "In a federation: a region did not answer; `detail` names it.",
    }
)
FEDERATED = (
    " In a federation, the usage of every region: each region's part in the caller's scope, "
    "summed (records merged by end, then region, then id; `next_cursor` works on any brain). "
    "When a region cannot be asked, the answer is 503 naming it, with Retry-After, never a "
    "sum without it; a region's refusal (say 403, a caller it does not know yet) is the "
    "answer."
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


@router.get(
    "/usage",
    response_model=UsagePage,
    responses=ERRORS,
    summary="Usage records of jobs that ended in a period, with the period's totals",
    description="The records of the caller's tenant (staff: any)." + FEDERATED,
)
async def list_usage(
    principal: PrincipalDep,
    cases: AdminUseCasesDep,
    federated: FederatedReadsDep,
    start: From = None,
    to: To = None,
    tenant: TenantParam = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[
        str | None, Query(description="From the previous page's next_cursor.")
    ] = None,
) -> UsagePage | Response:
    if federated is not None:
        return await federated.usage(
            principal, start=start, end=to, tenant=tenant, limit=limit, cursor=cursor
        )
    return await cases.usage.records(
        principal, start=start, end=to, tenant=tenant, limit=limit, cursor=cursor
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
    description="The report of the caller's tenant (staff: any)." + FEDERATED,
)
async def usage_report(
    principal: PrincipalDep,
    cases: AdminUseCasesDep,
    federated: FederatedReadsDep,
    start: From = None,
    to: To = None,
    tenant: TenantParam = None,
    format: Annotated[Literal["json", "csv"], Query(description="json (default) or csv.")] = "json",
) -> UsageReport | Response:
    if federated is not None:
        merged = await federated.report(principal, start=start, end=to, tenant=tenant)
        if isinstance(merged, Response):
            return merged
        report = merged
    else:
        report = await cases.usage.report(principal, start=start, end=to, tenant=tenant)
    return _csv(report) if format == "csv" else report


def _csv(report: UsageReport) -> Response:
    """The report's rows as CSV (`CSV_COLUMNS`), as an attachment named by its period."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in report.rows:
        writer.writerow(
            [
                row.tenant,
                row.site,
                "true" if row.simulated else "false",
                row.records,
                *(repr(round(getattr(row, name), 6)) for name in CSV_COLUMNS[4:]),
            ]
        )
    name = f"usage-{report.start:%Y%m%dT%H%M%SZ}-{report.end:%Y%m%dT%H%M%SZ}.csv"
    return Response(
        out.getvalue(),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )
