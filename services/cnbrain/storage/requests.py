"""Tenants' placement requests: insert with idempotency keys, read, list, change state, and
their decisions.

States and the only transitions allowed are the domain's (`cnbrain.domain.states`:
`RequestState`, `REQUEST_TRANSITIONS`); `set_states` refuses any other change with
InvalidTransition.

Tenant scoping: functions taking `tenant_id: str | None` see only that tenant's requests;
None (operators) sees every tenant's. A request of another tenant is simply not found.

The writes (`insert_requests`, `set_states`, `save_decisions`) take many requests and cost the
same statements for one as for many: one request is a batch of one. The regional brain
stores and settles batches of submissions with them.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, TypeVar, cast

from sqlalchemy import Table, and_, case, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import Select

from cnbrain.domain.states import REQUEST_TRANSITIONS, RequestState
from cnbrain.storage._sql import (
    check_limit,
    decode_keyset,
    driver_sql,
    encode_keyset,
    fetch_scalar,
)
from cnbrain.storage.clock import as_utc, utcnow
from cnbrain.storage.database import insert_on_conflict, on_postgresql
from cnbrain.storage.errors import (
    BadCursor,
    InvalidTransition,
    NotFoundError,
    RequestStoreError,
)
from cnbrain.storage.models import DecisionRecord, PlacementRequestRecord

__all__ = [
    "BadCursor",
    "Document",
    "InvalidTransition",
    "JsonText",
    "NewRequest",
    "NotFoundError",
    "RequestStoreError",
    "StateChange",
    "StoredRequest",
    "count_in_state",
    "find_by_idempotency_key",
    "get_decision",
    "get_decisions",
    "get_request",
    "get_request_and_decision",
    "insert_requests",
    "list_requests",
    "pending_requests",
    "save_decisions",
    "set_states",
    "tenants_of",
]


_Query = TypeVar("_Query", bound=Select[Any])

_PREDECESSORS: dict[str, list[str]] = {
    str(state): sorted(str(s) for s, after in REQUEST_TRANSITIONS.items() if state in after)
    for state in RequestState
}
"""The states each state may follow, as plain strings for the database."""

_REQUESTS = cast("Table", PlacementRequestRecord.__table__)

QUEUED_AT = PlacementRequestRecord.updated_at
"""When a queued request was queued: when it last went to `queued` (submitted to wait, or
preempted back into the queue); it waits since then. A request's row changes only with its
state (`set_states`; a job's reason only while it runs), and `queued` never follows
itself, so while a request is queued its `updated_at` is that moment. The queue's listing
(`queue_plans.in_order`) and the queue's metrics (`queue_stats`) both read it."""
_DECISIONS = cast("Table", DecisionRecord.__table__)


def _check_state(state: str) -> None:
    """Raise ValueError unless `state` is a request state."""
    if state not in _PREDECESSORS:
        raise ValueError(f"state {state!r} is not one of {', '.join(RequestState)}")


class JsonText(str):
    """A JSON document already encoded (say, by a model's `model_dump_json`): the `..._many`
    functions store it as it is rather than encoding it again."""

    __slots__ = ()


Document = dict[str, Any] | JsonText
"""A JSON document, as Python values or already encoded."""


@dataclass(frozen=True, slots=True)
class NewRequest:
    """A request to store as pending (see `insert_requests`)."""

    request_id: str
    tenant_id: str
    user_id: str
    body: Document
    idempotency_key: str | None = None
    created_at: datetime = field(default_factory=utcnow)


@dataclass(frozen=True, slots=True)
class StoredRequest:
    """A placement request as stored: its `body` (the request's JSON), whose it is, its
    state, and `reason` and `site_id` once set."""

    id: str
    tenant_id: str
    user_id: str
    idempotency_key: str | None
    body: dict[str, Any]
    state: str
    reason: str | None
    site_id: str | None
    created_at: datetime
    updated_at: datetime


_REQUEST_FIELDS = tuple(f.name for f in fields(StoredRequest))


def stored(record: PlacementRequestRecord) -> StoredRequest:
    """The value of a row of the requests table (for the other stores)."""
    return StoredRequest(**{name: getattr(record, name) for name in _REQUEST_FIELDS})


@dataclass(frozen=True, slots=True)
class StateChange:
    """Move `request_id` to `state`, setting `reason` and `site_id` when given (see
    `set_states`)."""

    request_id: str
    state: str
    reason: str | None = None
    site_id: str | None = None


async def insert_requests(session: AsyncSession, new: Sequence[NewRequest]) -> list[str | None]:
    """Insert pending requests with one statement, inside the caller's transaction.

    Returns, aligned with `new`: None for a request stored, or the id of the request that holds
    its (tenant, idempotency key) already (stored earlier, or earlier in `new`); that one is
    not stored, and the transaction stays usable. Raises RequestStoreError, naming the
    requests, when any other integrity rule fails (say, an unknown tenant or user, or a
    request id stored already): then none of `new` is stored and the caller must roll back
    (PostgreSQL aborts the transaction; a caller that goes on runs the insert in a
    SAVEPOINT). Duplicate request ids in `new` are a ValueError.
    """
    if not new:
        return []
    if len({n.request_id for n in new}) != len(new):
        raise ValueError("a request id appears more than once")
    try:
        if on_postgresql(session):
            result = await driver_sql(
                session,
                "INSERT INTO placement_requests (id, tenant_id, user_id, idempotency_key, body,"
                " state, created_at, updated_at)"
                " SELECT v.id, v.tenant_id, v.user_id, v.key, v.body, 'pending', v.at, v.at"
                " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::json[],"
                " $6::timestamptz[]) WITH ORDINALITY AS v(id, tenant_id, user_id, key, body, at, i)"
                " ORDER BY v.i"
                " ON CONFLICT (tenant_id, idempotency_key) DO NOTHING RETURNING id",
                [n.request_id for n in new],
                [n.tenant_id for n in new],
                [n.user_id for n in new],
                [n.idempotency_key for n in new],
                [_encoded(n.body) for n in new],
                [n.created_at for n in new],
            )
        else:
            r = _REQUESTS.c
            statement = (
                insert_on_conflict(session, _REQUESTS)
                .on_conflict_do_nothing(index_elements=[r.tenant_id, r.idempotency_key])
                .returning(r.id)
            )
            rows = [
                {
                    "id": n.request_id,
                    "tenant_id": n.tenant_id,
                    "user_id": n.user_id,
                    "idempotency_key": n.idempotency_key,
                    "body": _decoded(n.body),
                    "state": RequestState.PENDING,
                    "reason": None,
                    "site_id": None,
                    "created_at": n.created_at,
                    "updated_at": n.created_at,
                }
                for n in new
            ]
            result = await session.execute(statement, rows)
        stored = set(result.scalars())
    except IntegrityError as exc:
        names = ", ".join(repr(n.request_id) for n in new)
        raise RequestStoreError(
            f"{'request' if len(new) == 1 else 'requests'} {names} cannot be stored: "
            f"{exc.orig or exc}"
        ) from None
    answers: list[str | None] = []
    for n in new:
        if n.request_id in stored:
            answers.append(None)
            continue
        existing = (
            await find_by_idempotency_key(
                session, tenant_id=n.tenant_id, idempotency_key=n.idempotency_key
            )
            if n.idempotency_key is not None
            else None
        )
        if existing is None:
            raise RequestStoreError(f"request {n.request_id!r} was not stored")
        answers.append(existing.id)
    return answers


async def find_by_idempotency_key(
    session: AsyncSession, *, tenant_id: str, idempotency_key: str
) -> StoredRequest | None:
    """The tenant's request made with `idempotency_key`, if any."""
    record = await fetch_scalar(
        session,
        select(PlacementRequestRecord).where(
            PlacementRequestRecord.tenant_id == tenant_id,
            PlacementRequestRecord.idempotency_key == idempotency_key,
        ),
    )
    return None if record is None else stored(record)


async def get_request(
    session: AsyncSession, *, tenant_id: str | None, request_id: str, for_update: bool = False
) -> StoredRequest | None:
    """The request, if it exists and (unless `tenant_id` is None) belongs to the tenant.

    With `for_update`, the row stays locked until the transaction ends (PostgreSQL; SQLite
    transactions are serialised anyway), so a read-check-change sequence cannot interleave.
    """
    query = _scoped(
        select(PlacementRequestRecord).where(PlacementRequestRecord.id == request_id), tenant_id
    )
    if for_update:
        query = query.with_for_update()
    record = await fetch_scalar(session, query.execution_options(populate_existing=True))
    return None if record is None else stored(record)


async def pending_requests(
    session: AsyncSession,
    *,
    tenant_id: str | None = None,
    limit: int | None = None,
    created_before: datetime | None = None,
    state: RequestState = RequestState.PENDING,
) -> list[StoredRequest]:
    """Requests still pending (say, left so by a stop), oldest first; with `created_before`,
    only those created before it. With `state`, the requests in that state instead (say,
    queued)."""
    query = select(PlacementRequestRecord).where(PlacementRequestRecord.state == state)
    if created_before is not None:
        query = query.where(PlacementRequestRecord.created_at < created_before)
    query = _scoped(query, tenant_id).order_by(
        PlacementRequestRecord.created_at, PlacementRequestRecord.id
    )
    if limit is not None:
        query = query.limit(limit)
    return [stored(record) for record in await session.scalars(query)]


async def count_in_state(session: AsyncSession, *, tenant_id: str, state: RequestState) -> int:
    """How many of the tenant's requests are in `state`."""
    r = PlacementRequestRecord
    found = await session.scalar(
        select(func.count()).select_from(r).where(r.tenant_id == tenant_id, r.state == state)
    )
    return int(found or 0)


async def list_requests(
    session: AsyncSession,
    *,
    tenant_id: str | None,
    state: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> tuple[list[StoredRequest], str | None]:
    """One page of requests, newest first, and the cursor of the next page (None at the end).

    `created_after` is inclusive, `created_before` exclusive. Keyset pagination on
    (created_at, id): every request is listed exactly once across pages, even while new ones
    arrive. Raises BadCursor for a cursor not made here, ValueError for a bad limit/state.
    """
    check_limit(limit)
    r = PlacementRequestRecord
    query = _scoped(select(r), tenant_id)
    if state is not None:
        _check_state(state)
        query = query.where(r.state == state)
    if created_after is not None:
        query = query.where(r.created_at >= as_utc(created_after))
    if created_before is not None:
        query = query.where(r.created_at < as_utc(created_before))
    if cursor is not None:
        at, last_id = decode_keyset(cursor, str)
        query = query.where(or_(r.created_at < at, and_(r.created_at == at, r.id < last_id)))
    rows = [
        stored(record)
        for record in await session.scalars(
            query.order_by(r.created_at.desc(), r.id.desc()).limit(limit + 1)
        )
    ]
    if len(rows) <= limit:
        return rows, None
    page = rows[:limit]
    last = page[-1]
    return page, encode_keyset(last.created_at, last.id)


async def tenants_of(session: AsyncSession, request_ids: Sequence[str]) -> dict[str, str]:
    """The tenant of each request of `request_ids` that exists, by request id."""
    if not request_ids:
        return {}
    r = PlacementRequestRecord
    rows = await session.execute(select(r.id, r.tenant_id).where(r.id.in_(list(request_ids))))
    return {str(row[0]): str(row[1]) for row in rows}


async def set_states(
    session: AsyncSession,
    changes: Sequence[StateChange],
    *,
    tenant_id: str | None = None,
    at: datetime | None = None,
) -> datetime:
    """Move each request of `changes` (each at most once) to its state if `REQUEST_TRANSITIONS`
    allow it from its current state, setting its `reason` and `site_id` when given; with
    `tenant_id`, only that tenant's requests (another's is not found). One conditional UPDATE
    per target state does the check and the change, so concurrent changes cannot both win.
    `updated_at` becomes `at` (default: now), which is returned. Raises NotFoundError or
    InvalidTransition naming a request that cannot make its change; the others may have been
    changed, so the caller must roll back."""
    if len({c.request_id for c in changes}) != len(changes):
        raise ValueError("a request appears more than once")
    at = at or utcnow()
    groups: dict[str, list[StateChange]] = {}
    for change in changes:
        _check_state(change.state)
        groups.setdefault(change.state, []).append(change)
    r = _REQUESTS.c
    for state, group in groups.items():
        ids = [c.request_id for c in group]
        if on_postgresql(session):
            changed = await driver_sql(
                session,
                "UPDATE placement_requests AS r SET state = $1, updated_at = $2,"
                " reason = COALESCE(v.reason, r.reason), site_id = COALESCE(v.site_id, r.site_id)"
                " FROM unnest($3::text[], $4::text[], $5::text[]) AS v(id, reason, site_id)"
                " WHERE r.id = v.id AND r.state = ANY($6::text[])"
                " AND ($7::text IS NULL OR r.tenant_id = $7) RETURNING r.id",
                state,
                at,
                ids,
                [c.reason for c in group],
                [c.site_id for c in group],
                _PREDECESSORS[state],
                tenant_id,
            )
        else:
            values: dict[str, Any] = {"state": state, "updated_at": at}
            reasons = {c.request_id: c.reason for c in group if c.reason is not None}
            if reasons:
                values["reason"] = case(reasons, value=r.id, else_=r.reason)
            sites = {c.request_id: c.site_id for c in group if c.site_id is not None}
            if sites:
                values["site_id"] = case(sites, value=r.id, else_=r.site_id)
            statement = update(_REQUESTS).where(r.id.in_(ids), r.state.in_(_PREDECESSORS[state]))
            if tenant_id is not None:
                statement = statement.where(r.tenant_id == tenant_id)
            changed = await session.execute(statement.values(**values).returning(r.id))
        unchanged = set(ids) - set(changed.scalars())
        if unchanged:
            await _refuse(session, [i for i in ids if i in unchanged], state, tenant_id)
    return at


async def _refuse(
    session: AsyncSession, ids: Sequence[str], state: str, tenant_id: str | None
) -> None:
    """Raise for the first of `ids` (requests that did not change) that does not exist (or is
    not the tenant's), or whose state cannot go to `state`."""
    r = _REQUESTS.c
    query = select(r.id, r.state).where(r.id.in_(ids))
    if tenant_id is not None:
        query = query.where(r.tenant_id == tenant_id)
    found = dict((await session.execute(query)).all())
    for request_id in ids:
        if request_id not in found:
            raise NotFoundError(f"request {request_id!r} does not exist")
        raise InvalidTransition(request_id, found[request_id], state)


async def save_decisions(
    session: AsyncSession, documents: Mapping[str, Document], *, at: datetime | None = None
) -> None:
    """Store (or replace) the decision of every request of `documents` (request id ->
    decision JSON), in one statement."""
    if not documents:
        return
    at = at or utcnow()
    if on_postgresql(session):
        await driver_sql(
            session,
            "INSERT INTO decisions (request_id, document, created_at)"
            " SELECT v.id, v.document, $3 FROM unnest($1::text[], $2::json[]) AS v(id, document)"
            " ON CONFLICT (request_id) DO UPDATE"
            " SET document = excluded.document, created_at = excluded.created_at",
            list(documents),
            [_encoded(d) for d in documents.values()],
            at,
        )
        return
    statement = insert_on_conflict(session, _DECISIONS)
    statement = statement.on_conflict_do_update(
        index_elements=[_DECISIONS.c.request_id],
        set_={"document": statement.excluded.document, "created_at": statement.excluded.created_at},
    )
    await session.execute(
        statement,
        [
            {"request_id": request_id, "document": _decoded(document), "created_at": at}
            for request_id, document in documents.items()
        ],
    )


async def get_decision(
    session: AsyncSession, *, request_id: str, tenant_id: str | None = None
) -> dict[str, Any] | None:
    """The decision JSON of the request, if both exist and the request is the tenant's."""
    query = (
        select(DecisionRecord.document)
        .join(PlacementRequestRecord, PlacementRequestRecord.id == DecisionRecord.request_id)
        .where(DecisionRecord.request_id == request_id)
    )
    return await fetch_scalar(session, _scoped(query, tenant_id))


async def get_request_and_decision(
    session: AsyncSession, *, tenant_id: str | None, request_id: str
) -> tuple[StoredRequest, dict[str, Any] | None] | None:
    """`get_request` and `get_decision` in one query: the request (if it exists and, unless
    `tenant_id` is None, is the tenant's) and its decision JSON (None: not decided yet)."""
    query = _scoped(
        select(PlacementRequestRecord, DecisionRecord.document)
        .outerjoin(DecisionRecord, DecisionRecord.request_id == PlacementRequestRecord.id)
        .where(PlacementRequestRecord.id == request_id),
        tenant_id,
    ).execution_options(populate_existing=True)
    row = (await session.execute(query)).first()
    if row is None:
        return None
    record, document = row
    return stored(record), document


async def get_decisions(
    session: AsyncSession, *, request_ids: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """The decision JSON of each of `request_ids` that has one, in one query."""
    if not request_ids:
        return {}
    rows = await session.execute(
        select(_DECISIONS.c.request_id, _DECISIONS.c.document).where(
            _DECISIONS.c.request_id.in_(list(request_ids))
        )
    )
    return dict(rows.all())


def _encoded(document: Document) -> str:
    return document if isinstance(document, JsonText) else json.dumps(document)


def _decoded(document: Document) -> dict[str, Any]:
    """The document as Python values (the Core JSON columns encode it themselves)."""
    if isinstance(document, JsonText):
        decoded: dict[str, Any] = json.loads(document)
        return decoded
    return document


def _scoped(query: _Query, tenant_id: str | None) -> _Query:
    if tenant_id is None:
        return query
    return query.where(PlacementRequestRecord.tenant_id == tenant_id)
