"""The audit log: every state change and operator action."""

from typing import Annotated

from fastapi import APIRouter, Query

from cnbrain.regional.deps import BrainDep, PrincipalDep
from cnbrain.regional.problems import forbidden, invalid, responses
from cnbrain.regional.schemas import AuditPage, AuditView
from cnbrain.regional.security import Role
from cnbrain.storage import audit

router = APIRouter(prefix="/v1", tags=["audit"])


@router.get(
    "/audit",
    response_model=AuditPage,
    responses=responses({403: "Tenant users may not read the audit log."}),
    summary="Read the audit log (staff: all; tenant admins: their tenant)",
)
async def read_audit(
    brain: BrainDep,
    principal: PrincipalDep,
    object_type: Annotated[str | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    cursor: Annotated[str | None, Query()] = None,
) -> AuditPage:
    if principal.role is Role.TENANT_USER:
        raise forbidden("tenant users may not read the audit log")
    async with brain.sessions() as session:
        try:
            entries, next_cursor = await audit.list_entries(
                session,
                tenant_id=principal.tenant_scope(),
                object_type=object_type,
                limit=limit,
                cursor=cursor,
            )
        except audit.BadCursor:
            raise invalid("cursor", "not a cursor this brain issued") from None
    return AuditPage(
        items=[
            AuditView(
                id=e.id,
                at=e.at,
                actor=e.actor,
                tenant=e.tenant_id,
                action=e.action,
                object_type=e.object_type,
                object_id=e.object_id,
                detail=e.detail,
            )
            for e in entries
        ],
        next_cursor=next_cursor,
    )
