"""The decisions of what a brain holds, for its steering to follow (`federation.steered_paths`)."""

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import ReservationState
from cnbrain.storage.models import DecisionRecord, PeerReservation, ReservationRecord


async def held_decisions(session: AsyncSession) -> list[dict[str, Any]]:
    """The decision of every reservation this brain holds: of each held reservation of its
    own, its request's decision when that names the reservation; of each held part of a
    cross-brain reservation, the decision committed with it."""
    own = await session.execute(
        select(ReservationRecord.id, DecisionRecord.document)
        .join(DecisionRecord, DecisionRecord.request_id == ReservationRecord.request_id)
        .where(ReservationRecord.state == ReservationState.HELD)
    )
    found = [doc for rid, doc in own if doc.get("reservation_id") == rid]
    parts = await session.execute(
        select(PeerReservation.id, PeerReservation.decision).where(
            PeerReservation.state == ReservationState.HELD
        )
    )
    found += [doc for rid, doc in parts if doc is not None and doc.get("reservation_id") == rid]
    return found


async def decision_of_part(session: AsyncSession, reservation_id: str) -> dict[str, Any] | None:
    """The decision committed with this brain's part of reservation `reservation_id`."""
    part = await session.get(PeerReservation, reservation_id)
    return None if part is None else part.decision
