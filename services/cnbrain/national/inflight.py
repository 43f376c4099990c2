"""The coordinator's record of placements under way (`coordinator.Journal`) in the national
brain's database (`storage.inflight_placements`), each call its own transaction.

Every placement is recorded with the replica deciding it (`replica`). The orphans are those
of replicas whose lease lapsed (`national.replicas`), and, at the first look of a replica,
those it recorded under its id before it started again."""

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.national.coordinator import InFlight
from cnbrain.storage import inflight_placements
from cnbrain.storage.clock import utcnow


class DatabaseJournal:
    """The cross-region placements under way of replica `replica`, kept in the database
    that every replica shares."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, replica: str) -> None:
        self._sessions = sessions
        self._replica = replica
        self._looked = False

    async def begin(self, placements: Sequence[InFlight]) -> None:
        async with self._sessions.begin() as session:
            await inflight_placements.add(
                session,
                [
                    inflight_placements.InFlight(one.reservation_id, one.request_id, one.owners)
                    for one in placements
                ],
                replica=self._replica,
            )

    async def end(self, reservation_ids: Sequence[str]) -> None:
        async with self._sessions.begin() as session:
            await inflight_placements.remove(session, reservation_ids)

    async def under_way(self) -> list[InFlight]:
        """Every placement recorded as under way, by any replica, oldest first."""
        async with self._sessions() as session:
            found = await inflight_placements.all_in_flight(session)
        return [InFlight(one.reservation_id, one.request_id, one.owners) for one in found]

    async def orphaned(self) -> list[InFlight]:
        async with self._sessions() as session:
            found = await inflight_placements.orphaned(
                session, replica=self._replica, now=utcnow(), with_own=not self._looked
            )
        self._looked = True
        return [InFlight(one.reservation_id, one.request_id, one.owners) for one in found]
