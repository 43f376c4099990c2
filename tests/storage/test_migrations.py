"""The Alembic migrations create exactly the schema of the models, and drop all of it."""

import asyncio
import json
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, inspect, text

from cnbrain.domain.request import PlacementRequest, ResourceDemand
from cnbrain.storage import requests, tenants
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


async def test_postgres_downgrade_below_priority_classes_strips_their_fields(
    empty_postgres_url: str,
) -> None:
    await _check_stripped(empty_postgres_url)


async def test_sqlite_downgrade_below_priority_classes_strips_their_fields(tmp_path: Any) -> None:
    await _check_stripped(f"sqlite:///{tmp_path / 'classes.db'}")


async def _check_stripped(url: str) -> None:
    """A request stored with a class and a max wait loses them (and `start`) when the schema
    goes down below 0006, and keeps every other field."""
    await upgrade_schema(url)
    engine = create_engine(url)
    asked = PlacementRequest(
        id="req-1",
        tenant="acme",
        source_province="ZJ",
        resources=ResourceDemand(cpu=2.0, memory_gib=4.0),
        duration_hours=1.5,
        priority_class="high",
        max_wait_s=60.0,
    )
    try:
        async with session_factory(engine).begin() as session:
            await tenants.create_tenant(session, tenant_id="acme", name="Acme")
            user = await tenants.create_user(
                session, name="ana", role="tenant-user", tenant_id="acme"
            )
            await requests.insert_requests(
                session,
                [
                    requests.NewRequest(
                        request_id="req-1",
                        tenant_id="acme",
                        user_id=user.id,
                        body=requests.JsonText(asked.model_dump_json()),
                    )
                ],
            )
        await downgrade_schema(url, revision="0005")
        async with engine.connect() as connection:
            (body,) = (await connection.execute(text("SELECT body FROM placement_requests"))).one()
            assert "priority_classes" not in await connection.run_sync(_tables)
    finally:
        await engine.dispose()
    stored = json.loads(body) if isinstance(body, str) else body
    assert stored == asked.model_dump(
        mode="json", exclude={"priority_class", "max_wait_s", "start"}
    )
