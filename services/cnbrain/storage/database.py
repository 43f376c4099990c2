"""Engines, sessions and schema migrations for PostgreSQL (asyncpg) and SQLite (aiosqlite).

`create_engine` accepts plain or async URLs (`postgresql://`, `postgresql+asyncpg://`,
`sqlite:///path`, `sqlite+aiosqlite:///path`) and always returns an async engine.

SQLite connections run in WAL mode with a 30 s busy timeout and foreign keys on, and every
transaction starts with `BEGIN IMMEDIATE`: the write lock is taken up front, so transactions are
serialised and a read-then-write transaction never fails with "database is locked" halfway
through; it also makes SAVEPOINTs and transactional DDL work as on PostgreSQL.

A SQLite database file is private: `create_engine` creates it with mode 0600 (its missing
folders 0700) before SQLite opens it, so its journal files, which take its mode, are private
too; an existing one is set to 0600.

`upgrade_schema` runs the Alembic migrations in `migrations/` to a revision on the caller's
event loop (through `AsyncConnection.run_sync`, sharing one connection with Alembic).
"""

import os
from enum import StrEnum
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Table, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.ext.asyncio import create_async_engine as _create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from cnbrain.private_files import create_private_file

SQLITE_BUSY_TIMEOUT_MS = 30_000
MIGRATION_LOCK = 0x636E_6272_0001
"""PostgreSQL advisory lock held while migrating, so replicas starting together take turns."""
SEED_LOCK = 0x636E_6272_0002
"""PostgreSQL advisory lock held while seeding the map (see registry.seed_if_empty)."""
MIGRATIONS_ENV = "CNBRAIN_MIGRATIONS"
"""Environment variable naming the Alembic script directory, when not the repository's."""

_DEFAULT_MIGRATIONS = Path(__file__).resolve().parents[3] / "migrations"


def async_url(url: str) -> URL:
    """`url` with its driver replaced by the async one (asyncpg or aiosqlite).

    Raises ValueError for anything but PostgreSQL and SQLite URLs.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ValueError(f"not a database URL: {url!r} ({exc})") from None
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+asyncpg")
    if backend == "sqlite":
        return parsed.set(drivername="sqlite+aiosqlite")
    raise ValueError(
        f"unsupported database URL {parsed.render_as_string(hide_password=True)!r}: "
        "use postgresql://... or sqlite:///path"
    )


def create_engine(url: str, *, echo: bool = False, pool_size: int | None = None) -> AsyncEngine:
    """An async engine for `url` (see `async_url`); SQLite gets the private file, pragmas and
    BEGIN IMMEDIATE described in the module docstring. The caller disposes of it
    (`await engine.dispose()`)."""
    target = async_url(url)
    options: dict[str, Any] = {"echo": echo}
    if pool_size is not None:
        options["pool_size"] = pool_size
    if target.get_backend_name() == "postgresql":
        options["pool_pre_ping"] = True
    engine = _create_async_engine(target, **options)
    if target.get_backend_name() == "sqlite":
        if target.database and target.database != ":memory:" and not target.query.get("uri"):
            create_private_file(Path(target.database))
        _configure_sqlite(engine)
    return engine


class Dialect(StrEnum):
    """The databases a brain runs on."""

    POSTGRESQL = "postgresql"
    SQLITE = "sqlite"


_DIALECT = "cnbrain.dialect"
"""The key of a session's dialect in its `info`."""


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions bound to `engine` whose objects stay readable after commit; each knows the
    dialect of `engine` (`dialect_of`), decided here once."""
    return async_sessionmaker(
        engine, expire_on_commit=False, info={_DIALECT: Dialect(engine.dialect.name)}
    )


def dialect_of(session: AsyncSession) -> Dialect:
    """The dialect of a session made by `session_factory`."""
    dialect: Dialect = session.info[_DIALECT]
    return dialect


def on_postgresql(session: AsyncSession) -> bool:
    return dialect_of(session) is Dialect.POSTGRESQL


def insert_on_conflict(session: AsyncSession, table: Table | Any) -> Any:
    """An INSERT into `table` (a table or a model) in the session's dialect, which has the
    ON CONFLICT clauses (PostgreSQL and SQLite spell them alike)."""
    return postgresql.insert(table) if on_postgresql(session) else sqlite.insert(table)


async def advisory_lock(session: AsyncSession, key: int) -> None:
    """Hold PostgreSQL advisory lock `key` until the transaction ends; a no-op on SQLite,
    whose transactions (BEGIN IMMEDIATE) are serialised already."""
    if on_postgresql(session):
        await session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


async def upgrade_schema(
    url: str, *, revision: str = "head", script_location: Path | None = None
) -> None:
    """Run the migrations up to `revision` on the database at `url`, in one transaction.

    Safe to call from a running event loop, and from several processes at once (on PostgreSQL
    they take turns on an advisory lock; SQLite transactions are serialised anyway).
    `script_location` defaults to `$CNBRAIN_MIGRATIONS` or the repository's `migrations/`.
    """
    await _run_alembic(url, "upgrade", revision, script_location)


async def downgrade_schema(
    url: str, *, revision: str = "base", script_location: Path | None = None
) -> None:
    """Run the migrations down to `revision` (by default: drop everything)."""
    await _run_alembic(url, "downgrade", revision, script_location)


def alembic_config(*, script_location: Path | None = None, url: str | None = None) -> Config:
    """An Alembic configuration without an ini file (so the caller's logging is untouched).

    Raises FileNotFoundError naming the directory when the migration scripts are missing.
    """
    location = script_location or Path(os.environ.get(MIGRATIONS_ENV) or _DEFAULT_MIGRATIONS)
    if not (location / "env.py").is_file():
        raise FileNotFoundError(
            f"no Alembic migrations at {location}; set {MIGRATIONS_ENV} to the migrations directory"
        )
    config = Config()
    config.set_main_option("script_location", str(location))
    if url is not None:
        config.attributes["database_url"] = url
    return config


async def _run_alembic(url: str, action: str, revision: str, script_location: Path | None) -> None:
    config = alembic_config(script_location=script_location, url=url)
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(_run_with_connection, config, action, revision)
    finally:
        await engine.dispose()


def _run_with_connection(connection: Connection, config: Config, action: str, rev: str) -> None:
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
    config.attributes["connection"] = connection
    if action == "upgrade":
        command.upgrade(config, rev)
    else:
        command.downgrade(config, rev)


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        # Take transaction control from the sqlite3 driver; `_on_begin` emits BEGIN itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
