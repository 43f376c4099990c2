"""The audit log: every state change and operator action, who did it, to what.

Entries are append-only; `list_entries` pages through them newest first.
"""

from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.storage._sql import check_limit, decode_cursor, encode_cursor
from cnbrain.storage.errors import BadCursor
from cnbrain.storage.models import AuditEntry, utcnow

__all__ = ["BadCursor", "list_entries", "record"]


async def record(
    session: AsyncSession,
    *,
    actor: str,
    action: str,
    object_type: str,
    object_id: str,
    tenant_id: str | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Append one entry in the caller's transaction (it is kept only if that commits).

    `actor` is a user id (or a component name such as "scheduler"); `action` a verb such as
    "request.cancel" or "site.register"; `detail` any JSON-able facts.
    """
    await session.execute(
        insert(AuditEntry).values(
            at=utcnow(),
            actor=actor,
            tenant_id=tenant_id,
            action=action,
            object_type=object_type,
            object_id=object_id,
            detail=detail or {},
        )
    )


async def list_entries(
    session: AsyncSession,
    *,
    tenant_id: str | None = None,
    object_type: str | None = None,
    object_id: str | None = None,
    limit: int = 100,
    cursor: str | None = None,
) -> tuple[list[AuditEntry], str | None]:
    """One page of entries, newest first, filtered by tenant / object; and the next cursor
    (None at the end). Raises BadCursor for a cursor not made here."""
    check_limit(limit)
    query = select(AuditEntry)
    if tenant_id is not None:
        query = query.where(AuditEntry.tenant_id == tenant_id)
    if object_type is not None:
        query = query.where(AuditEntry.object_type == object_type)
    if object_id is not None:
        query = query.where(AuditEntry.object_id == object_id)
    if cursor is not None:
        (last,) = decode_cursor(cursor, arity=1)
        if not isinstance(last, int) or isinstance(last, bool):
            raise BadCursor(f"cursor {cursor!r} is not valid")
        query = query.where(AuditEntry.id < last)
    rows = list(await session.scalars(query.order_by(AuditEntry.id.desc()).limit(limit + 1)))
    if len(rows) <= limit:
        return rows, None
    page = rows[:limit]
    return page, encode_cursor([page[-1].id])
