"""What a brain holds, for its steering to follow (`federation.steered_paths`): the ids of
its held reservations, and the decisions that name them."""

from collections.abc import Collection
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import ReservationState
from cnbrain.storage.models import DecisionRecord, PeerReservation, ReservationRecord

CHUNK = 500
"""Ids per statement when documents are read by id."""


async def held_reservations(session: AsyncSession) -> set[str]:
    """The id of every reservation this brain holds: its own held reservations, and its held
    parts of cross-brain reservations committed with a decision."""
    own = await session.scalars(
        select(ReservationRecord.id).where(ReservationRecord.state == ReservationState.HELD)
    )
    parts = await session.scalars(
        select(PeerReservation.id).where(
            PeerReservation.state == ReservationState.HELD, PeerReservation.decision.is_not(None)
        )
    )
    return {*own, *parts}


async def decisions_of(
    session: AsyncSession, reservation_ids: Collection[str]
) -> dict[str, dict[str, Any]]:
    """The decision of each of those reservations that has one naming it, by reservation id:
    of a reservation of this brain's own, its request's decision; of a part of a cross-brain
    reservation, the decision committed with it. Whatever their state."""
    found: dict[str, dict[str, Any]] = {}
    ids = sorted(set(reservation_ids))
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        own = await session.execute(
            select(ReservationRecord.id, DecisionRecord.document)
            .join(DecisionRecord, DecisionRecord.request_id == ReservationRecord.request_id)
            .where(ReservationRecord.id.in_(chunk))
        )
        parts = await session.execute(
            select(PeerReservation.id, PeerReservation.decision).where(
                PeerReservation.id.in_(chunk)
            )
        )
        for rid, document in [*own, *parts]:
            if document is not None and document.get("reservation_id") == rid:
                found[rid] = document
    return found
