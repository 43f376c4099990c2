"""Fixtures of the storage tests: the migrated databases of `tests.migrated_databases`, and
`seeded`: the built-in `china` map registered in the database; its MapArrays.
"""

import pytest
import pytest_asyncio

from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.china import china_document
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.document import MapDocument
from cnbrain.storage import registry
from tests.databases import Sessions
from tests.migrated_databases import (
    database_url,
    empty_postgres_url,
    engine,
    postgres_url,
    sessions,
    sqlite_url,
)

__all__ = [
    "database_url",
    "empty_postgres_url",
    "engine",
    "postgres_url",
    "sessions",
    "sqlite_url",
]


@pytest.fixture(scope="session")
def china() -> MapDocument:
    return china_document()


@pytest_asyncio.fixture
async def seeded(sessions: Sessions, china: MapDocument) -> MapArrays:
    """The china map registered in the database; arrays of the map as loaded back."""
    async with sessions.begin() as session:
        await registry.seed_map(session, document=china)
    async with sessions() as session:
        document = await registry.load_document(session)
    return MapArrays.build(ComputeNetworkMap.from_document(document))
