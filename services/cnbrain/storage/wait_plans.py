"""The national brain's plans of waiting cross-region requests (`models.WaitPlanRecord`):
what each holds over its planned window, by resource named by id."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import Table, delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.storage.clock import as_utc, epoch_s, moment_of
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.models import WaitPlanRecord

_PLANS = cast("Table", WaitPlanRecord.__table__)

Demand = tuple[tuple[tuple[str, ...], int], ...]
"""What a plan holds: (resource named by id, amount) pairs."""


@dataclass(frozen=True, slots=True)
class StoredPlan:
    """Request `request_id`'s plan: `demand` over `[start_s, end_s)` (epoch seconds), on
    `nodes` nodes of its site."""

    request_id: str
    source_region: str
    demand: Demand
    start_s: int
    end_s: int
    nodes: int = 1


async def save(session: AsyncSession, plan: StoredPlan, *, now: datetime) -> None:
    """Store `plan` as planned at `now` (replacing its request's earlier plan), in the
    caller's transaction."""
    values = {
        "source_region": plan.source_region,
        "demand": [[list(key), amount] for key, amount in plan.demand],
        "start_at": moment_of(plan.start_s),
        "end_at": moment_of(plan.end_s),
        "nodes": plan.nodes,
        "planned_at": as_utc(now),
    }
    await session.execute(
        insert_on_conflict(session, _PLANS)
        .values(request_id=plan.request_id, **values)
        .on_conflict_do_update(index_elements=[_PLANS.c.request_id], set_=values)
    )


async def drop(session: AsyncSession, request_ids: Sequence[str]) -> None:
    """Forget the plans of `request_ids` (none: nothing), in the caller's transaction."""
    if request_ids:
        await session.execute(delete(_PLANS).where(_PLANS.c.request_id.in_(request_ids)))


async def live(
    session: AsyncSession, *, now: datetime, fresh_s: float, exclude: str | None = None
) -> list[StoredPlan]:
    """The plans made within the last `fresh_s` seconds before `now` that have not ended by
    `now`, but `exclude`'s, earliest start first; plans that ended or went stale are deleted
    (in the caller's transaction)."""
    now = as_utc(now)
    stale = now - timedelta(seconds=fresh_s)
    p = _PLANS.c
    await session.execute(delete(_PLANS).where((p.end_at <= now) | (p.planned_at < stale)))
    query = select(p.request_id, p.source_region, p.demand, p.start_at, p.end_at, p.nodes)
    if exclude is not None:
        query = query.where(p.request_id != exclude)
    rows = await session.execute(query.order_by(p.start_at, p.request_id))
    return [
        StoredPlan(
            request_id=request_id,
            source_region=source_region,
            demand=tuple((tuple(str(k) for k in key), int(amount)) for key, amount in demand),
            start_s=epoch_s(as_utc(start_at)),
            end_s=epoch_s(as_utc(end_at)),
            nodes=nodes,
        )
        for request_id, source_region, demand, start_at, end_at, nodes in rows
    ]
