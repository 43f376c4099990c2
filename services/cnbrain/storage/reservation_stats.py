"""What a brain's ledger holds, counted for the metrics: its own reservations and its parts
of cross-brain reservations that are not released, by state. Two grouped queries over
indexed state columns."""

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import ReservationState
from cnbrain.storage.models import PeerReservation, ReservationRecord

LOCAL = "local"
"""The kind of a reservation this brain took alone."""

PART = "part"
"""The kind of this brain's part of a cross-brain reservation."""


async def open_reservations(session: AsyncSession) -> dict[tuple[str, str], int]:
    """How many reservations are held or prepared, by (kind, state): `local` ones (held) and
    `part`s (prepared or held); a pair with none is left out."""
    counts: dict[tuple[str, str], int] = {}
    for kind, table in ((LOCAL, ReservationRecord), (PART, PeerReservation)):
        rows = await session.execute(
            select(table.state, func.count())
            .where(table.state != ReservationState.RELEASED)
            .group_by(table.state)
        )
        counts.update(((kind, str(state)), int(count)) for state, count in rows)
    return counts
