"""The audit log: every state change and operator action."""

from typing import Annotated

from fastapi import APIRouter, Query

from cnbrain.regional.deps import AdminUseCasesDep, PrincipalDep
from cnbrain.regional.problems import responses
from cnbrain.regional.schemas import AuditPage

router = APIRouter(prefix="/v1", tags=["audit"])


@router.get(
    "/audit",
    response_model=AuditPage,
    responses=responses({403: "Tenant users may not read the audit log."}),
    summary="Read the audit log (staff: all; tenant admins: their tenant)",
)
async def read_audit(
    principal: PrincipalDep,
    cases: AdminUseCasesDep,
    object_type: Annotated[str | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    cursor: Annotated[str | None, Query()] = None,
) -> AuditPage:
    """The audit log, newest first: every state change and operator action, with its actor and
    detail. Staff read all; tenant admins their tenant's; tenant users are refused. Filter by
    `object_type`; pages on `next_cursor`."""
    return await cases.audit.page(principal, object_type=object_type, limit=limit, cursor=cursor)
