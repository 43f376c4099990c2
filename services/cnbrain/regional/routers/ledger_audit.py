"""The ledger auditor's last report, for admins."""

from datetime import UTC, datetime

from fastapi import APIRouter

from cnbrain.ledger.audit import Finding
from cnbrain.regional.deps import AdminDep, AuditorDep, SettingsDep
from cnbrain.regional.problems import responses
from cnbrain.regional.schemas import LedgerAuditView, LedgerFinding

router = APIRouter(prefix="/v1", tags=["operator"])


@router.get(
    "/ledger-audit",
    response_model=LedgerAuditView,
    responses=responses({401: "No valid API key.", 403: "Admins only."}),
    summary="The ledger auditor's last audit: when, what it found and what it released",
)
async def read_ledger_audit(
    auditor: AuditorDep, settings: SettingsDep, _: AdminDep
) -> LedgerAuditView:
    """Admins only. The ledger auditor's last run: when, what it found wrong (over-commits,
    used amounts that differ from their reservations, holds of ended or unrunnable requests,
    expired prepared holds) and what it released, with totals since the brain started."""
    last = auditor.last
    return LedgerAuditView(
        audited_at=datetime.fromtimestamp(last.at_s, UTC) if last is not None else None,
        audits=auditor.audits,
        interval_s=settings.audit_interval_s,
        grace_s=settings.audit_grace_s,
        found=dict(last.found) if last is not None else {},
        repaired=dict(last.repaired) if last is not None else {},
        found_total=dict(auditor.found_total),
        repaired_total=dict(auditor.repaired_total),
        findings=[_view(f) for f in last.findings] if last is not None else [],
        repairs=[_view(f) for f in last.repairs] if last is not None else [],
    )


def _view(finding: Finding) -> LedgerFinding:
    return LedgerFinding(
        kind=finding.kind.value,
        object_id=finding.object_id,
        request_id=finding.request_id,
        detail=finding.detail,
    )
