"""Reading the audit log: every state change and operator action, newest first."""

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.errors import Forbidden, Invalid
from cnbrain.regional.schemas import AuditPage, AuditView
from cnbrain.regional.security import Principal, Role
from cnbrain.storage import audit


class AuditLog:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def page(
        self, principal: Principal, *, object_type: str | None, limit: int, cursor: str | None
    ) -> AuditPage:
        """The entries from `cursor` on (of objects of `object_type`, when given): staff see
        every entry, tenant admins their tenant's. Raises Forbidden (a tenant user) or Invalid
        (field `cursor`: one not issued here)."""
        if principal.role is Role.TENANT_USER:
            raise Forbidden("tenant users may not read the audit log")
        async with self._sessions() as session:
            try:
                entries, next_cursor = await audit.list_entries(
                    session,
                    tenant_id=principal.tenant_scope(),
                    object_type=object_type,
                    limit=limit,
                    cursor=cursor,
                )
            except audit.BadCursor:
                raise Invalid("not a cursor this brain issued", field="cursor") from None
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
