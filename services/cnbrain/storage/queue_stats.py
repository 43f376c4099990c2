"""The admission queue in figures, for the metrics: how many requests wait under each class
name they give, and since when the longest-waiting of them waits (`requests.QUEUED_AT`).
One grouped query over the queued requests (the state column is indexed), whatever the
length of the queue."""

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import RequestState
from cnbrain.storage.clock import as_utc
from cnbrain.storage.models import PlacementRequestRecord
from cnbrain.storage.requests import QUEUED_AT


@dataclass(frozen=True, slots=True)
class QueuedGroup:
    """`count` queued requests that name class `class_name` (None: they name none), the
    earliest of them queued at `since` (`requests.QUEUED_AT`: a request queued again after
    a preemption waits from then)."""

    class_name: str | None
    count: int
    since: datetime


async def queued_by_class(session: AsyncSession) -> list[QueuedGroup]:
    """The queued requests grouped by the class name they give (in no particular order)."""
    r = PlacementRequestRecord
    name = r.body["priority_class"].as_string()
    rows = await session.execute(
        select(name, func.count(), func.min(QUEUED_AT))
        .where(r.state == RequestState.QUEUED)
        .group_by(name)
    )
    return [QueuedGroup(class_name, int(count), as_utc(since)) for class_name, count, since in rows]
