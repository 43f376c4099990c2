"""Requests' events (`cnbrain.domain.events`): append them, read a request's back.

Events are append-only. `append_many` writes a batch with one statement, in the caller's
transaction: the writers of a request's state append its events in the transaction that
changes it, so an event is kept exactly when its change is. `events_of` reads one request's
events oldest first (by time, then in the order they were appended).

Tenant scoping as in `cnbrain.storage.requests`: with a `tenant_id`, another tenant's request
is not found.
"""

import json
from collections.abc import Sequence
from typing import cast

from sqlalchemy import Table, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.events import RequestEvent, RequestEventKind
from cnbrain.storage._sql import driver_sql
from cnbrain.storage.clock import as_utc
from cnbrain.storage.database import on_postgresql
from cnbrain.storage.models import PlacementRequestRecord, RequestEventRecord

__all__ = ["append_many", "events_of"]

_EVENTS = cast("Table", RequestEventRecord.__table__)


async def append_many(session: AsyncSession, events: Sequence[RequestEvent]) -> None:
    """Append `events`, in order, with one statement in the caller's transaction (none for
    no events). Their requests must exist (a foreign key)."""
    if not events:
        return
    if on_postgresql(session):  # one statement without compiling it
        await driver_sql(
            session,
            "INSERT INTO request_events (request_id, kind, at, detail)"
            " SELECT v.request_id, v.kind, v.at, v.detail"
            " FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::json[]) WITH ORDINALITY"
            " AS v(request_id, kind, at, detail, i) ORDER BY v.i",
            [e.request_id for e in events],
            [str(e.kind) for e in events],
            [e.at for e in events],
            [json.dumps(dict(e.detail)) for e in events],
        )
        return
    await session.execute(
        insert(_EVENTS),
        [
            {"request_id": e.request_id, "kind": str(e.kind), "at": e.at, "detail": dict(e.detail)}
            for e in events
        ],
    )


async def events_of(
    session: AsyncSession, *, request_id: str, tenant_id: str | None
) -> list[RequestEvent] | None:
    """The request's events, oldest first (by time, then as appended), in one query; None when
    the request does not exist or (unless `tenant_id` is None) is another tenant's. A request
    stored before events were kept has none; events of kinds this version does not know
    (written by a later one) are left out."""
    r, e = PlacementRequestRecord, RequestEventRecord
    query = (
        select(e.kind, e.at, e.detail)
        .select_from(r)
        .outerjoin(e, e.request_id == r.id)
        .where(r.id == request_id)
        .order_by(e.at, e.id)
    )
    if tenant_id is not None:
        query = query.where(r.tenant_id == tenant_id)
    rows = (await session.execute(query)).all()
    if not rows:
        return None
    return [
        RequestEvent(request_id, RequestEventKind(kind), as_utc(at), detail)
        for kind, at, detail in rows
        if kind in _KINDS
    ]


_KINDS = frozenset(RequestEventKind)
