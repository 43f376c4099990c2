"""The national brain's cross-region placements under way (`models.InFlightPlacementRecord`):
recorded before their parts are prepared, deleted once each outcome is decided."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Table, delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.models import InFlightPlacementRecord

_INFLIGHT = cast("Table", InFlightPlacementRecord.__table__)


@dataclass(frozen=True, slots=True)
class InFlight:
    """Reservation `reservation_id` of request `request_id`, with parts in `owners`."""

    reservation_id: str
    request_id: str
    owners: tuple[str, ...]


async def add(session: AsyncSession, placements: Sequence[InFlight]) -> None:
    """Record `placements` in the caller's transaction (one recorded already is kept)."""
    if not placements:
        return
    now = utcnow()
    await session.execute(
        insert_on_conflict(session, _INFLIGHT)
        .values(
            [
                {
                    "reservation_id": one.reservation_id,
                    "request_id": one.request_id,
                    "owners": list(one.owners),
                    "since": now,
                }
                for one in placements
            ]
        )
        .on_conflict_do_nothing(index_elements=[_INFLIGHT.c.reservation_id])
    )


async def remove(session: AsyncSession, reservation_ids: Sequence[str]) -> None:
    """Forget the placements of `reservation_ids`, in the caller's transaction."""
    if reservation_ids:
        await session.execute(
            delete(_INFLIGHT).where(_INFLIGHT.c.reservation_id.in_(list(reservation_ids)))
        )


async def all_in_flight(session: AsyncSession) -> list[InFlight]:
    """Every placement recorded, oldest first."""
    r = InFlightPlacementRecord
    rows = await session.execute(
        select(r.reservation_id, r.request_id, r.owners).order_by(r.since, r.reservation_id)
    )
    return [InFlight(rid, request_id, tuple(owners)) for rid, request_id, owners in rows]
