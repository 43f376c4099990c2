"""Room holds (`models.RoomHoldRecord`): compute on a site of this brain that preemption
freed for a request of another region's queue, left to that request for a short while."""

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.storage.clock import as_utc
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.models import RoomHoldRecord

_HOLDS = cast("Table", RoomHoldRecord.__table__)


@dataclass(frozen=True, slots=True)
class RoomHold:
    """The compute left to request `request_id` on `site_id` until `until` (ledger units)."""

    request_id: str
    site_id: str
    cpu_m: int
    mem_mib: int
    storage_gib: int
    accelerator_model: str | None
    accelerator_count: int
    until: datetime


async def hold(session: AsyncSession, one: RoomHold, *, now: datetime) -> None:
    """Store `one` (replacing an earlier hold of its request), in the caller's transaction,
    and forget the holds that lapsed before `now`."""
    await session.execute(delete(_HOLDS).where(_HOLDS.c.until < as_utc(now)))
    values = {**asdict(one), "until": as_utc(one.until)}
    await session.execute(
        insert_on_conflict(session, _HOLDS)
        .values(**values)
        .on_conflict_do_update(
            index_elements=[_HOLDS.c.request_id],
            set_={k: v for k, v in values.items() if k != "request_id"},
        )
    )


async def active(session: AsyncSession, *, now: datetime) -> list[RoomHold]:
    """The holds that last beyond `now`, oldest request id first."""
    r = RoomHoldRecord
    rows = await session.execute(
        select(
            r.request_id,
            r.site_id,
            r.cpu_m,
            r.mem_mib,
            r.storage_gib,
            r.accelerator_model,
            r.accelerator_count,
            r.until,
        )
        .where(r.until > as_utc(now))
        .order_by(r.request_id)
    )
    return [RoomHold(*row[:-1], until=as_utc(row[-1])) for row in rows]
