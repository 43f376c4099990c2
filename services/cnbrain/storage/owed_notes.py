"""Notes owed to other brains (`models.OwedNoteRecord`): what became of a segment this brain
re-routed, kept for the request's source region until it has been told, so an outcome
outlives that region's outage and this brain's restart. A note is opaque here (its wire
message); the oldest are told first.

Nothing here commits: the caller owns the transaction."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.storage.clock import as_utc, utcnow
from cnbrain.storage.models import OwedNoteRecord


@dataclass(frozen=True, slots=True)
class OwedNote:
    """Note `id` (in the order kept), owed to region `region_id` about request `request_id`:
    its wire `message`, kept `since` (aware, UTC)."""

    id: int
    region_id: str
    request_id: str
    message: bytes
    since: datetime


async def owe(session: AsyncSession, *, region_id: str, request_id: str, message: bytes) -> int:
    """Keep `message` for region `region_id`; its id."""
    row = OwedNoteRecord(
        region_id=region_id, request_id=request_id, message=message, since=utcnow()
    )
    session.add(row)
    await session.flush()
    return row.id


async def owed(session: AsyncSession, *, limit: int) -> list[OwedNote]:
    """The oldest `limit` notes owed, oldest first, each `since` an aware time in UTC."""
    n = OwedNoteRecord
    rows = await session.scalars(select(n).order_by(n.id).limit(limit))
    return [OwedNote(r.id, r.region_id, r.request_id, r.message, as_utc(r.since)) for r in rows]


async def settle(session: AsyncSession, ids: Sequence[int]) -> None:
    """Forget the notes `ids` (told, or given up)."""
    if ids:
        await session.execute(delete(OwedNoteRecord).where(OwedNoteRecord.id.in_(sorted(ids))))
