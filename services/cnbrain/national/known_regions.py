"""The region directory's registrations (`regions.KnownRegions`) in the national brain's
database (`storage.known_regions`), each call its own transaction."""

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.storage import known_regions
from cnbrain.storage.known_regions import KnownRegion


class DatabaseRegions:
    """The regions the national brain knows, kept in its database."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def save(self, region_id: str, endpoint: str, provinces: frozenset[str]) -> None:
        async with self._sessions.begin() as session:
            await known_regions.save(session, KnownRegion(region_id, endpoint, provinces))

    async def load(self) -> list[tuple[str, str, frozenset[str]]]:
        async with self._sessions() as session:
            found = await known_regions.all_known(session)
        return [(one.region_id, one.endpoint, one.provinces) for one in found]
