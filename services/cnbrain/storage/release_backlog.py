"""The national brain's release backlog (`models.ReleaseBacklogRecord`): parts an owner could
not release when asked, to be released again until they are."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Table, delete, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.models import ReleaseBacklogRecord

_BACKLOG = cast("Table", ReleaseBacklogRecord.__table__)

MAX_REASON = 500
"""Characters of a reason kept (the column's length)."""


@dataclass(frozen=True, slots=True)
class Owed:
    """The release of `owner`'s part of reservation `reservation_id`, for `reason`; with
    `keep_delivery`, but its delivery flows."""

    owner: str
    reservation_id: str
    reason: str
    keep_delivery: bool = False


async def add(session: AsyncSession, owed: Sequence[Owed]) -> None:
    """Record `owed` in the caller's transaction (one already recorded is kept as it was)."""
    if not owed:
        return
    now = utcnow()
    await session.execute(
        insert_on_conflict(session, _BACKLOG)
        .values(
            [
                {
                    "owner": one.owner,
                    "reservation_id": one.reservation_id,
                    "reason": one.reason[:MAX_REASON],
                    "keep_delivery": one.keep_delivery,
                    "since": now,
                }
                for one in owed
            ]
        )
        .on_conflict_do_nothing(index_elements=[_BACKLOG.c.owner, _BACKLOG.c.reservation_id])
    )


async def remove(session: AsyncSession, owner: str, reservation_ids: Sequence[str]) -> None:
    """Forget the releases owed to `owner` for `reservation_ids`, in the caller's transaction."""
    if not reservation_ids:
        return
    c = _BACKLOG.c
    await session.execute(
        delete(_BACKLOG).where(
            tuple_(c.owner, c.reservation_id).in_([(owner, rid) for rid in reservation_ids])
        )
    )


async def all_owed(session: AsyncSession) -> list[Owed]:
    """Every release owed, oldest first."""
    r = ReleaseBacklogRecord
    rows = await session.execute(
        select(r.owner, r.reservation_id, r.reason, r.keep_delivery).order_by(
            r.since, r.owner, r.reservation_id
        )
    )
    return [Owed(*row) for row in rows]
