"""The audit log: every state change and operator action, who did it, to what.

Entries are append-only (`record_many` several in one statement, `record` one: the same
statement with one entry); `list_entries` pages through them newest first.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.storage._sql import check_limit, decode_cursor, driver_sql, encode_cursor
from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import on_postgresql
from cnbrain.storage.errors import BadCursor
from cnbrain.storage.models import AuditEntry

__all__ = ["BadCursor", "Entry", "list_entries", "record", "record_many"]

_AUDIT = cast("Table", AuditEntry.__table__)


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry for `record_many`; the fields mean what `record`'s arguments do."""

    actor: str
    action: str
    object_type: str
    object_id: str
    tenant_id: str | None = None
    detail: dict[str, Any] | None = None
    at: datetime = field(default_factory=utcnow)


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
    entry = Entry(
        actor=actor,
        action=action,
        object_type=object_type,
        object_id=object_id,
        tenant_id=tenant_id,
        detail=detail,
    )
    await record_many(session, [entry])


async def record_many(session: AsyncSession, entries: Sequence[Entry]) -> None:
    """Append `entries`, in order, with one statement in the caller's transaction."""
    if not entries:
        return
    if on_postgresql(session):  # one statement without compiling it
        await driver_sql(
            session,
            "INSERT INTO audit_log (at, actor, tenant_id, action, object_type, object_id, detail)"
            " SELECT v.at, v.actor, v.tenant_id, v.action, v.object_type, v.object_id, v.detail"
            " FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[],"
            " $6::text[], $7::json[]) WITH ORDINALITY"
            " AS v(at, actor, tenant_id, action, object_type, object_id, detail, i) ORDER BY v.i",
            [e.at for e in entries],
            [e.actor for e in entries],
            [e.tenant_id for e in entries],
            [e.action for e in entries],
            [e.object_type for e in entries],
            [e.object_id for e in entries],
            [json.dumps(e.detail or {}) for e in entries],
        )
        return
    await session.execute(
        insert(_AUDIT),
        [
            {
                "at": e.at,
                "actor": e.actor,
                "tenant_id": e.tenant_id,
                "action": e.action,
                "object_type": e.object_type,
                "object_id": e.object_id,
                "detail": e.detail or {},
            }
            for e in entries
        ],
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
