"""The national brain's cross-region placements under way (`models.InFlightPlacementRecord`):
recorded before their parts are prepared, with the replica deciding them, deleted once each
outcome is decided."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Table, delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.storage.clock import as_utc, utcnow
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.models import InFlightPlacementRecord, LeaseRecord

_INFLIGHT = cast("Table", InFlightPlacementRecord.__table__)


@dataclass(frozen=True, slots=True)
class InFlight:
    """Reservation `reservation_id` of request `request_id`, with parts in `owners`."""

    reservation_id: str
    request_id: str
    owners: tuple[str, ...]


def replica_lease(replica: str) -> str:
    """The name of the lease that replica `replica` renews while it is alive."""
    return f"replica:{replica}"


async def add(session: AsyncSession, placements: Sequence[InFlight], *, replica: str) -> None:
    """Record `placements` as decided by `replica`, in the caller's transaction (one
    recorded already is kept)."""
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
                    "replica": replica,
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
    """Every placement recorded, of every replica, oldest first."""
    r = InFlightPlacementRecord
    rows = await session.execute(
        select(r.reservation_id, r.request_id, r.owners).order_by(r.since, r.reservation_id)
    )
    return [InFlight(rid, request_id, tuple(owners)) for rid, request_id, owners in rows]


async def orphaned(
    session: AsyncSession, *, replica: str, now: datetime, with_own: bool
) -> list[InFlight]:
    """The placements no live replica decides, oldest first: those of a replica other than
    `replica` whose lease (`replica_lease`) is missing or lapsed before `now`, those that
    name no replica, and, when `with_own`, those of `replica` itself (a replica started again
    under its id left them)."""
    r, lease = InFlightPlacementRecord, LeaseRecord
    rows = (
        await session.execute(
            select(r.reservation_id, r.request_id, r.owners, r.replica).order_by(
                r.since, r.reservation_id
            )
        )
    ).all()
    others = {row.replica for row in rows if row.replica and row.replica != replica}
    alive: set[str] = set()
    if others:
        names = {replica_lease(other): other for other in others}
        leases = await session.execute(
            select(lease.name, lease.until).where(lease.name.in_(sorted(names)))
        )
        alive = {names[name] for name, until in leases if as_utc(until) >= as_utc(now)}
    return [
        InFlight(row.reservation_id, row.request_id, tuple(row.owners))
        for row in rows
        if not row.replica
        or (row.replica == replica and with_own)
        or (row.replica != replica and row.replica not in alive)
    ]
