"""Engines: URL normalisation, SQLite connection settings, transactions and savepoints."""

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from cnbrain.storage.database import async_url, create_engine, session_factory

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql://postgres@127.0.0.1:5432/cnbrain", "postgresql+asyncpg"),
        ("postgresql+asyncpg://postgres@127.0.0.1/cnbrain", "postgresql+asyncpg"),
        ("postgres://postgres@127.0.0.1/cnbrain", "postgresql+asyncpg"),
        ("sqlite:///var/cnbrain.db", "sqlite+aiosqlite"),
        ("sqlite+aiosqlite:///var/cnbrain.db", "sqlite+aiosqlite"),
    ],
)
async def test_urls_are_switched_to_the_async_drivers(url: str, driver: str) -> None:
    normalised = async_url(url)
    assert normalised.drivername == driver
    assert normalised.database == make_url(url).database


@pytest.mark.parametrize("url", ["mysql://root@localhost/db", "not a url"])
async def test_other_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="URL"):
        async_url(url)


async def test_sqlite_runs_in_wal_mode_with_foreign_keys_and_a_busy_timeout(
    tmp_path: Path,
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        async with engine.connect() as connection:
            assert (await connection.execute(text("PRAGMA journal_mode"))).scalar() == "wal"
            assert (await connection.execute(text("PRAGMA foreign_keys"))).scalar() == 1
            assert (await connection.execute(text("PRAGMA busy_timeout"))).scalar() == 30000
    finally:
        await engine.dispose()


async def test_sqlite_savepoints_roll_back_inside_the_outer_transaction(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        async with engine.begin() as connection:
            await connection.execute(text("CREATE TABLE t (x INTEGER PRIMARY KEY)"))
        async with session_factory(engine).begin() as session:
            await session.execute(text("INSERT INTO t VALUES (1)"))
            nested = await session.begin_nested()
            await session.execute(text("INSERT INTO t VALUES (2)"))
            await nested.rollback()
            await session.execute(text("INSERT INTO t VALUES (3)"))
        async with engine.connect() as connection:
            rows = (await connection.execute(text("SELECT x FROM t ORDER BY x"))).scalars().all()
        assert rows == [1, 3]
    finally:
        await engine.dispose()
