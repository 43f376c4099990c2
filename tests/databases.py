"""Real PostgreSQL databases and Redis namespaces for tests, and the type of a database's
session factory.

PostgreSQL is the server at $CNBRAIN_TEST_POSTGRES_URL (default
postgresql://postgres@127.0.0.1:5432/postgres) and Redis the one at $CNBRAIN_TEST_REDIS_URL
(default redis://127.0.0.1:6379/15). When either does not answer, the test fails with the URL
and the command that starts it (`bash scripts/services.sh`); nothing is skipped.
"""

import os
import secrets

import asyncpg  # type: ignore[import-untyped]
import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

POSTGRES_ENV = "CNBRAIN_TEST_POSTGRES_URL"
REDIS_ENV = "CNBRAIN_TEST_REDIS_URL"
START_HINT = "start the services with `bash scripts/services.sh`"

Sessions = async_sessionmaker[AsyncSession]
"""What a test opens sessions of a database from (`session_factory` of its engine)."""


def postgres_server_url() -> str:
    return os.environ.get(POSTGRES_ENV) or "postgresql://postgres@127.0.0.1:5432/postgres"


def redis_url() -> str:
    return os.environ.get(REDIS_ENV) or "redis://127.0.0.1:6379/15"


def libpq_url(url: str) -> str:
    """`url` as libpq (and asyncpg) spell it: without SQLAlchemy's driver name."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def create_postgres_database(prefix: str = "cnbrain_test") -> str:
    """A new, empty database on the test server; returns its URL."""
    server = postgres_server_url()
    try:
        connection = await asyncpg.connect(libpq_url(server), timeout=5)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {server} ({exc}); {START_HINT}, "
            f"or point {POSTGRES_ENV} at a server",
            pytrace=False,
        )
    name = f"{prefix}_{secrets.token_hex(5)}"
    try:
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()
    return make_url(server).set(database=name).render_as_string(hide_password=False)


async def drop_postgres_database(url: str) -> None:
    connection = await asyncpg.connect(libpq_url(postgres_server_url()), timeout=5)
    try:
        await connection.execute(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')
    finally:
        await connection.close()


async def require_redis() -> str:
    """The test Redis URL, after checking that it answers."""
    url = redis_url()
    client: Redis = Redis.from_url(url)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        pytest.fail(
            f"Redis is not reachable at {url} ({exc}); {START_HINT}, "
            f"or point {REDIS_ENV} at a server",
            pytrace=False,
        )
    finally:
        await client.aclose()
    return url
