"""The unit of work for a change of the brain's capacity: one transaction, bracketed for the
cached snapshot (`local_change`), announced to the replicas when it changed something."""

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.federation.local_ledger import CapacityWatch, LocalChange, local_change


class CapacityChanges:
    """Opens units of work over the brain's database. `announce()` tells the other replicas
    that capacity changed; it never raises."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        watch: CapacityWatch,
        announce: Callable[[], Awaitable[None]],
    ) -> None:
        self._sessions = sessions
        self._watch = watch
        self._announce = announce

    @asynccontextmanager
    async def begin(
        self, session: AsyncSession | None = None
    ) -> AsyncIterator[tuple[AsyncSession, LocalChange]]:
        """One transaction (on `session`'s connection, or a new one) and the change it makes:
        the block tells the change what it `took` or that it `free`d capacity. The cached
        snapshot follows as `local_change` describes; once the transaction has committed, a
        change that took or freed capacity is announced. Raises what the block or the commit
        raises (after rolling back)."""
        async with local_change(self._watch) as change:
            if session is None:
                async with self._sessions.begin() as opened:
                    yield opened, change
            else:
                async with session.begin():
                    yield session, change
        if change.changed:
            await self._announce()
