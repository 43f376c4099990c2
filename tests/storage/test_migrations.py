"""The Alembic migrations create exactly the schema of the models, and drop all of it."""

import asyncio
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, inspect, text

from cnbrain.storage import tenants
from cnbrain.storage.database import (
    create_engine,
    downgrade_schema,
    session_factory,
    upgrade_schema,
)
from cnbrain.storage.models import Base

pytestmark = pytest.mark.asyncio


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


def _tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())


async def _check(url: str) -> None:
    await upgrade_schema(url)
    await upgrade_schema(url)  # at head already: nothing to do
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            assert await connection.run_sync(_differences) == []
            tables = await connection.run_sync(_tables)
        assert tables == {table.name for table in Base.metadata.sorted_tables} | {"alembic_version"}
        await downgrade_schema(url)
        async with engine.connect() as connection:
            assert await connection.run_sync(_tables) <= {"alembic_version"}
        await upgrade_schema(url)  # and back up again
        async with engine.connect() as connection:
            assert await connection.run_sync(_differences) == []
    finally:
        await engine.dispose()


async def test_postgres_upgrade_matches_the_models_and_downgrade_drops_everything(
    empty_postgres_url: str,
) -> None:
    await _check(empty_postgres_url)


async def test_sqlite_upgrade_matches_the_models_and_downgrade_drops_everything(
    tmp_path: Any,
) -> None:
    await _check(f"sqlite:///{tmp_path / 'fresh.db'}")


async def test_replicas_starting_together_migrate_once(empty_postgres_url: str) -> None:
    await asyncio.gather(*(upgrade_schema(empty_postgres_url) for _ in range(3)))
    engine = create_engine(empty_postgres_url)
    try:
        async with engine.connect() as connection:
            assert await connection.run_sync(_differences) == []
    finally:
        await engine.dispose()


async def test_downgrading_below_disabled_users_revokes_their_keys(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'disabled.db'}"
    await upgrade_schema(url)
    engine = create_engine(url)
    try:
        async with session_factory(engine).begin() as session:
            await tenants.create_tenant(session, tenant_id="acme", name="Acme")
            for user_id in ("gone", "kept"):
                await tenants.create_user(
                    session, user_id=user_id, name=user_id, role="tenant-user", tenant_id="acme"
                )
                await tenants.create_api_key(session, user_id=user_id)
            await tenants.disable_user(session, user_id="gone")
        await downgrade_schema(url, revision="0003")
        async with engine.connect() as connection:
            rows = await connection.execute(
                text("SELECT user_id, revoked_at IS NOT NULL FROM api_keys ORDER BY user_id")
            )
            assert [tuple(row) for row in rows] == [("gone", 1), ("kept", 0)]
    finally:
        await engine.dispose()
