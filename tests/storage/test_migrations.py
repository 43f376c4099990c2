"""The Alembic migrations create exactly the schema of the models, and drop all of it."""

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, inspect, text
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.request import PlacementRequest, ResourceDemand
from cnbrain.ledger.calendar import Window
from cnbrain.netmap.document import MapDocument
from cnbrain.storage import fair_shares, ledger_store, peer_ledger, registry, requests, tenants
from cnbrain.storage.clock import epoch_s
from cnbrain.storage.database import (
    create_engine,
    downgrade_schema,
    session_factory,
    upgrade_schema,
)
from cnbrain.storage.models import Base
from cnbrain.storage.requests import NewRequest, insert_requests

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


_TIME = sa.DateTime(timezone=True)


def _reservations(*times: str) -> sa.TableClause:
    """The reservations table of a revision before 0024, with its time columns `times`."""
    return sa.table(
        "reservations",
        *(sa.column(n, sa.String) for n in ("id", "request_id", "tenant_id", "site_id", "state")),
        *(sa.column(n, sa.BigInteger) for n in ("cpu_m", "mem_mib", "storage_gib", "mbps")),
        sa.column("accelerator_count", sa.BigInteger),
        *(sa.column(name, _TIME) for name in times),
    )


_RESERVATIONS_0005 = _reservations("created_at")
_PARTS_0005 = sa.table(
    "peer_reservations",
    *(sa.column(name, sa.String) for name in ("id", "request_id", "tenant_id", "state")),
    *(sa.column(name, sa.BigInteger) for name in ("cpu_m", "mem_mib", "storage_gib", "mbps")),
    sa.column("accelerator_count", sa.BigInteger),
    sa.column("counts_quota", sa.Boolean),
    sa.column("request", sa.JSON),
    sa.column("created_at", _TIME),
)

_RESERVATIONS_0023 = _reservations("created_at", "start_at", "end_at")
_FAIR_SHARES = sa.table(
    "fair_shares",
    sa.column("tenant_id", sa.String),
    sa.column("weight", sa.Float),
    sa.column("nominal", sa.JSON),
    sa.column("borrowing_limit", sa.JSON),
    sa.column("updated_at", _TIME),
)
_WAIT_PLANS = sa.table(
    "wait_plans",
    *(sa.column(name, sa.String) for name in ("request_id", "source_region")),
    sa.column("demand", sa.JSON),
    *(sa.column(name, _TIME) for name in ("start_at", "end_at", "planned_at")),
)
_TENANTS = sa.table(
    "tenants",
    sa.column("id", sa.String),
    sa.column("name", sa.String),
    sa.column("created_at", _TIME),
)
_USED = ("used_cpu_m", "used_mem_mib", "used_accelerators", "used_mbps", "active_requests")
_QUOTAS_0005 = sa.table(
    "quotas", sa.column("tenant_id", sa.String), *(sa.column(n, sa.BigInteger) for n in _USED)
)


async def _create_tenant_0005(session: AsyncSession, tenant_id: str, name: str) -> None:
    """A tenant with an unlimited quota, as the schema of revision 0005 holds them."""
    created = datetime(2026, 11, 30, tzinfo=UTC)
    await session.execute(sa.insert(_TENANTS).values(id=tenant_id, name=name, created_at=created))
    await session.execute(
        sa.insert(_QUOTAS_0005).values(tenant_id=tenant_id, **dict.fromkeys(_USED, 0))
    )


@pytest.fixture(params=["postgres", "sqlite"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """A database without any table: PostgreSQL, then SQLite."""
    if request.param == "postgres":
        return str(request.getfixturevalue("empty_postgres_url"))
    return f"sqlite:///{tmp_path / 'fresh.db'}"


async def test_upgrading_gives_stored_reservations_the_windows_of_their_requests(
    fresh_url: str, china: MapDocument
) -> None:
    url = fresh_url
    await upgrade_schema(url, revision="0005")
    created = datetime(2026, 11, 30, 8, 0, 0, 250_000, tzinfo=UTC)
    start = epoch_s(created)  # to the second
    amounts = {"cpu_m": 1000, "mem_mib": 0, "storage_gib": 0, "mbps": 0, "accelerator_count": 0}
    engine = create_engine(url)
    try:
        async with session_factory(engine).begin() as session:
            await registry.seed_map(session, document=china)
            await _create_tenant_0005(session, "acme", "Acme")
            await tenants.create_user(
                session, user_id="alice", name="Alice", role="tenant-user", tenant_id="acme"
            )
            await insert_requests(
                session,
                [
                    NewRequest("req-timed", "acme", "alice", body={"duration_hours": 2.5}),
                    NewRequest("req-untimed", "acme", "alice", body={}),
                ],
            )
            site = china.sites[0].id
            await session.execute(
                sa.insert(_RESERVATIONS_0005),
                [
                    {
                        "id": f"rsv-{name}",
                        "request_id": f"req-{name}",
                        "tenant_id": "acme",
                        "site_id": site,
                        "state": "held",
                        "created_at": created,
                        **amounts,
                    }
                    for name in ("timed", "untimed")
                ],
            )
            await session.execute(
                sa.insert(_PARTS_0005),
                [
                    {
                        "id": rid,
                        "request_id": request_id,
                        "tenant_id": "acme",
                        "state": "held",
                        "counts_quota": False,
                        "request": recorded,
                        "created_at": created,
                        **amounts,
                    }
                    for rid, request_id, recorded in (
                        ("part-recorded", "elsewhere", {"duration_hours": 1}),
                        ("part-local", "req-timed", None),
                        ("part-unknown", "elsewhere", None),
                    )
                ],
            )
        await upgrade_schema(url)
        async with session_factory(engine)() as session:
            windows = {
                name: (await ledger_store.held_claims(session, request_id=f"req-{name}"))[0].window
                for name in ("timed", "untimed")
            }
            for rid in ("part-recorded", "part-local", "part-unknown"):
                row = await peer_ledger.get(session, reservation_id=rid)
                assert row is not None
                windows[rid] = Window(epoch_s(row.start_at), epoch_s(row.end_at))
    finally:
        await engine.dispose()
    longest = 10**5 * 3600
    assert windows == {
        "timed": Window(start, start + 9000),
        "untimed": Window(start, start + longest),
        "part-recorded": Window(start, start + 3600),
        "part-local": Window(start, start + 9000),
        "part-unknown": Window(start, start + longest),
    }


async def test_downgrading_below_fair_shares_drops_them_and_keeps_the_tenants(
    fresh_url: str,
) -> None:
    url = fresh_url
    await upgrade_schema(url)
    engine = create_engine(url)
    try:
        async with session_factory(engine).begin() as session:
            await tenants.create_tenant(session, tenant_id="acme", name="Acme")
            share = fair_shares.FairShare(weight=2.0, cohort="lab")
            assert await fair_shares.put_share(session, "acme", share)
        await downgrade_schema(url, revision="0009")
        async with engine.connect() as connection:
            assert "fair_shares" not in await connection.run_sync(_tables)
            rows = await connection.execute(text("SELECT id FROM tenants"))
            assert [tuple(row) for row in rows] == [("acme",)]
        await upgrade_schema(url)
        async with session_factory(engine)() as session:
            assert await fair_shares.get_share(session, "acme") is None
            assert await fair_shares.admission_terms(session) == fair_shares.AdmissionTerms()
    finally:
        await engine.dispose()


async def test_upgrading_counts_stored_accelerators_in_thousandths_and_back(
    fresh_url: str, china: MapDocument
) -> None:
    url = fresh_url
    await upgrade_schema(url, revision="0023")
    site = china.sites[0].id
    at = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)
    engine = create_engine(url)

    async def rows(sql: str) -> list[tuple[Any, ...]]:
        async with engine.connect() as connection:
            return [tuple(row) for row in await connection.execute(text(sql))]

    def documents(found: list[tuple[Any, ...]]) -> list[Any]:
        return [json.loads(v) if isinstance(v, str) else v for row in found for v in row]

    try:
        async with session_factory(engine).begin() as session:
            await registry.seed_map(session, document=china)
            await session.execute(
                text("UPDATE site_accelerators SET cap = 8, used = 3, external = 1")
            )
            await session.execute(sa.insert(_TENANTS).values(id="acme", name="Acme", created_at=at))
            await session.execute(
                text(
                    "INSERT INTO quotas (tenant_id, limit_accelerators, used_cpu_m, used_mem_mib,"
                    " used_accelerators, used_mbps, active_requests)"
                    " VALUES ('acme', 4, 0, 0, 3, 0, 1)"
                )
            )
            await tenants.create_user(
                session, user_id="alice", name="Alice", role="tenant-user", tenant_id="acme"
            )
            await insert_requests(session, [NewRequest("req-1", "acme", "alice", body={})])
            await session.execute(
                sa.insert(_RESERVATIONS_0023),
                [
                    {
                        "id": "rsv-1",
                        "request_id": "req-1",
                        "tenant_id": "acme",
                        "site_id": site,
                        "state": "held",
                        "created_at": at,
                        "cpu_m": 1000,
                        "mem_mib": 0,
                        "storage_gib": 0,
                        "mbps": 0,
                        "accelerator_count": 3,
                        "start_at": at,
                        "end_at": at,
                    }
                ],
            )
            await session.execute(
                sa.insert(_FAIR_SHARES),
                [
                    {
                        "tenant_id": "acme",
                        "weight": 1.0,
                        "nominal": {"cpu_m": 8000, "accelerator:A100": 2},
                        "borrowing_limit": {},
                        "updated_at": at,
                    }
                ],
            )
            await session.execute(
                sa.insert(_WAIT_PLANS),
                [
                    {
                        "request_id": "req-far",
                        "source_region": "east",
                        "demand": [
                            [["site", site, "acc", "A100"], 2],
                            [["site", site, "cpu_m"], 5],
                        ],
                        "start_at": at,
                        "end_at": at,
                        "planned_at": at,
                    }
                ],
            )
        await upgrade_schema(url)
        assert set(await rows("SELECT cap, used, external FROM site_accelerators")) == {
            (8000, 3000, 1000)
        }
        assert await rows(
            "SELECT limit_acc_milli, used_acc_milli, national_acc_milli FROM quotas"
        ) == [(4000, 3000, None)]
        assert await rows("SELECT accelerator_milli FROM reservations") == [(3000,)]
        assert documents(await rows("SELECT nominal FROM fair_shares")) == [
            {"cpu_m": 8000, "accelerator:A100": 2000}
        ]
        assert documents(await rows("SELECT demand FROM wait_plans")) == [
            [[["site", site, "acc", "A100"], 2000], [["site", site, "cpu_m"], 5]]
        ]
        async with engine.begin() as connection:
            await connection.execute(text("UPDATE reservations SET accelerator_milli = 2500"))
        await downgrade_schema(url, revision="0023")
        assert await rows("SELECT accelerator_count FROM reservations") == [(3,)]
        assert await rows("SELECT limit_accelerators, used_accelerators FROM quotas") == [(4, 3)]
        assert set(await rows("SELECT cap, used, external FROM site_accelerators")) == {(8, 3, 1)}
    finally:
        await engine.dispose()
