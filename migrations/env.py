"""Alembic environment for the cnbrain schema (`cnbrain.storage.models`).

The connection comes, in this order of preference, from:

1. `config.attributes["connection"]`: a synchronous Connection that the caller already opened
   (`cnbrain.storage.database.upgrade_schema` runs Alembic through `AsyncConnection.run_sync`);
2. `config.attributes["database_url"]`;
3. the `CNBRAIN_DATABASE_URL` environment variable;
4. `sqlalchemy.url` in the ini file.

Plain URLs are switched to the async drivers (asyncpg, aiosqlite). SQLite migrations render
operations in batch mode, since SQLite cannot alter most of a table in place.
"""

import asyncio
import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from cnbrain.storage.database import async_url, create_engine
from cnbrain.storage.models import Base

DATABASE_URL_ENV = "CNBRAIN_DATABASE_URL"

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def database_url() -> str:
    url = (
        config.attributes.get("database_url")
        or os.environ.get(DATABASE_URL_ENV)
        or config.get_main_option("sqlalchemy.url")
    )
    if not url:
        raise RuntimeError(f"no database URL: set {DATABASE_URL_ENV}")
    return str(url)


def run_migrations_offline() -> None:
    """Emit the SQL to stdout instead of running it."""
    url = async_url(database_url())
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=url.get_backend_name() == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def do_run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_async_migrations() -> None:
    engine = create_engine(database_url())
    try:
        async with engine.begin() as connection:
            await connection.run_sync(do_run_migrations)
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    shared = config.attributes.get("connection")
    if shared is not None:
        do_run_migrations(shared)
    else:
        asyncio.run(run_async_migrations())


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
