"""The coordinator's backlog of owed releases (`coordinator.Backlog`) in the national brain's
database (`storage.release_backlog`), each call its own transaction."""

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.storage import release_backlog
from cnbrain.storage.release_backlog import Owed


class DatabaseBacklog:
    """The releases owed, kept in the database."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def owe(
        self,
        owner: str,
        reservation_ids: Sequence[str],
        reason: str,
        *,
        keep_delivery: bool = False,
    ) -> None:
        async with self._sessions.begin() as session:
            await release_backlog.add(
                session, [Owed(owner, rid, reason, keep_delivery) for rid in reservation_ids]
            )

    async def paid(self, owner: str, reservation_ids: Sequence[str]) -> None:
        async with self._sessions.begin() as session:
            await release_backlog.remove(session, owner, reservation_ids)

    async def owed(self) -> list[tuple[str, str, str, bool]]:
        async with self._sessions() as session:
            found = await release_backlog.all_owed(session)
        return [(one.owner, one.reservation_id, one.reason, one.keep_delivery) for one in found]
