"""The plans of the admission queue: where each queued request stands, as the last admission
round planned it (`QueuePlan`). The round replaces them all at once; a request's view reads
its own."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import RequestState
from cnbrain.storage.clock import as_utc
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.models import PlacementRequestRecord, QueuePlanRecord
from cnbrain.storage.requests import QUEUED_AT

_PLANS = cast("Table", QueuePlanRecord.__table__)


@dataclass(frozen=True, slots=True)
class QueuePlan:
    """Queued request `request_id` is at `position` (0 first) with `estimated_start` (None:
    no start within its max wait yet), as planned at `planned_at`; `detail` says what blocks
    it (JSON: `{"blockers": [...], "reason": ...}`)."""

    request_id: str
    position: int
    estimated_start: datetime | None
    planned_at: datetime
    detail: dict[str, Any]


async def replace_all(session: AsyncSession, plans: Sequence[QueuePlan]) -> set[str]:
    """Make `plans` the whole stored plan, in the caller's transaction: the plans of other
    requests are deleted, these written over (a request that is no longer queued then, say
    cancelled or admitted meanwhile, is left out). Returns the ids of the requests whose
    plans were written."""
    c = _PLANS.c
    ids = [p.request_id for p in plans]
    await session.execute(delete(_PLANS).where(c.request_id.not_in(ids)))
    if not plans:
        return set()
    r = PlacementRequestRecord
    still = set(
        await session.scalars(select(r.id).where(r.id.in_(ids), r.state == RequestState.QUEUED))
    )
    rows = [
        {
            "request_id": p.request_id,
            "position": p.position,
            "estimated_start_at": None if p.estimated_start is None else as_utc(p.estimated_start),
            "planned_at": as_utc(p.planned_at),
            "detail": p.detail,
        }
        for p in plans
        if p.request_id in still
    ]
    if not rows:
        return set()
    statement = insert_on_conflict(session, _PLANS)
    excluded = statement.excluded
    await session.execute(
        statement.on_conflict_do_update(
            index_elements=[c.request_id],
            set_={
                "position": excluded.position,
                "estimated_start_at": excluded.estimated_start_at,
                "planned_at": excluded.planned_at,
                "detail": excluded.detail,
            },
        ),
        rows,
    )
    return {str(row["request_id"]) for row in rows}


async def plans_of(session: AsyncSession, request_ids: Sequence[str]) -> dict[str, QueuePlan]:
    """The stored plans of `request_ids`, by request id (those without one left out)."""
    if not request_ids:
        return {}
    found = await session.scalars(
        select(QueuePlanRecord).where(QueuePlanRecord.request_id.in_(list(request_ids)))
    )
    return {p.request_id: _plan(p) for p in found}


@dataclass(frozen=True, slots=True)
class Queued:
    """A queued request's plan, with its tenant, when it was submitted, when it was queued
    (`requests.QUEUED_AT`: it waits since then) and the priority class it names (None: the
    default class)."""

    plan: QueuePlan
    tenant_id: str
    submitted_at: datetime
    queued_at: datetime
    priority_class: str | None


async def in_order(
    session: AsyncSession, *, tenant_id: str | None, after: int, limit: int
) -> list[Queued]:
    """Up to `limit` stored plans of queued requests (of `tenant_id` only, when given) with a
    position after `after`, in queue order."""
    p, r = QueuePlanRecord, PlacementRequestRecord
    query = (
        select(p, r.tenant_id, r.created_at, QUEUED_AT, r.body["priority_class"].as_string())
        .join(r, r.id == p.request_id)
        .where(r.state == RequestState.QUEUED, p.position > after)
    )
    if tenant_id is not None:
        query = query.where(r.tenant_id == tenant_id)
    rows = await session.execute(query.order_by(p.position, p.request_id).limit(limit))
    return [
        Queued(
            plan=_plan(plan),
            tenant_id=str(tenant),
            submitted_at=as_utc(submitted),
            queued_at=as_utc(queued),
            priority_class=None if named is None else str(named),
        )
        for plan, tenant, submitted, queued, named in rows
    ]


def _plan(record: QueuePlanRecord) -> QueuePlan:
    return QueuePlan(
        request_id=record.request_id,
        position=record.position,
        estimated_start=None
        if record.estimated_start_at is None
        else as_utc(record.estimated_start_at),
        planned_at=as_utc(record.planned_at),
        detail=dict(record.detail),
    )
