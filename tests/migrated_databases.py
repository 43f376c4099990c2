"""Fixtures of real databases migrated by the project's Alembic scripts, for the tests of
storage and of what sits on it. Import them into a test module or conftest to use them.

- `database_url`: one fresh, migrated database per test module and backend, parametrised over
  PostgreSQL and SQLite. PostgreSQL is the server at $CNBRAIN_TEST_POSTGRES_URL (default
  postgresql://postgres@127.0.0.1:5432/postgres, see tests/databases.py); each module gets its
  own `cnbrain_test_<random>` database, dropped afterwards. A missing server fails the tests
  with the URL and how to start it; nothing is skipped.
- `engine`: an async engine on that database with every table emptied before the test.
- `sessions`: the sessions of `engine`.
- `empty_postgres_url`: a fresh PostgreSQL database without any table.
"""

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from cnbrain.storage.database import create_engine, session_factory, upgrade_schema
from cnbrain.storage.models import Base
from tests.databases import Sessions, create_postgres_database, drop_postgres_database


@pytest.fixture
def empty_postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database without any table, dropped after the test."""
    url = asyncio.run(create_postgres_database())
    yield url
    asyncio.run(drop_postgres_database(url))


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for the module."""
    url = asyncio.run(create_postgres_database())
    try:
        asyncio.run(upgrade_schema(url))
        yield url
    finally:
        asyncio.run(drop_postgres_database(url))


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh, migrated SQLite file for the module."""
    path: Path = tmp_path_factory.mktemp("sqlite") / "cnbrain.db"
    url = f"sqlite:///{path}"
    asyncio.run(upgrade_schema(url))
    return url


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def database_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest_asyncio.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    tables = [table.name for table in reversed(Base.metadata.sorted_tables)]
    async with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            await connection.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY"))
        else:
            for table in tables:
                await connection.execute(text(f"DELETE FROM {table}"))
    yield engine
    await engine.dispose()


@pytest.fixture
def sessions(engine: AsyncEngine) -> Sessions:
    return session_factory(engine)
