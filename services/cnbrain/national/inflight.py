"""The coordinator's record of placements under way (`coordinator.Journal`) in the national
brain's database (`storage.inflight_placements`), each call its own transaction."""

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.national.coordinator import InFlight
from cnbrain.storage import inflight_placements


class DatabaseJournal:
    """The cross-region placements under way, kept in the database."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def begin(self, placements: Sequence[InFlight]) -> None:
        async with self._sessions.begin() as session:
            await inflight_placements.add(
                session,
                [
                    inflight_placements.InFlight(one.reservation_id, one.request_id, one.owners)
                    for one in placements
                ],
            )

    async def end(self, reservation_ids: Sequence[str]) -> None:
        async with self._sessions.begin() as session:
            await inflight_placements.remove(session, reservation_ids)

    async def under_way(self) -> list[InFlight]:
        async with self._sessions() as session:
            found = await inflight_placements.all_in_flight(session)
        return [InFlight(one.reservation_id, one.request_id, one.owners) for one in found]
