"""A region's ties to the national brain (in-process, its gRPC on loopback) outlive an
outage of the region's PostgreSQL: the summaries it cannot make meanwhile, and the tenancy
changes it cannot write, are tried again, and once the database is back the national brain
hears the region again and the region has the changes."""

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
import pytest_asyncio
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.tenancy import TenantCreated
from cnbrain.federation.live_map import LiveMap
from cnbrain.national.composition import NationalBrain, running
from cnbrain.national.settings import NationalSettings
from cnbrain.netmap.china import china_document
from cnbrain.regional.federation import NationalLink
from cnbrain.regional.settings import Settings
from cnbrain.regional.use_cases.tenancy_sync import FollowTenancy
from cnbrain.rpc.security import PeerSecurity
from cnbrain.storage import registry, tenants
from cnbrain.storage.database import create_engine, session_factory, upgrade_schema
from tests.databases import (
    create_postgres_database,
    drop_postgres_database,
    libpq_url,
    postgres_server_url,
)
from tests.polling import until

pytestmark = pytest.mark.asyncio

INTERVAL_S = 0.2


@pytest_asyncio.fixture
async def east_url() -> AsyncIterator[str]:
    url = await create_postgres_database("cnbrain_link")
    try:
        yield url
    finally:
        await allow_connections(url, True)
        await drop_postgres_database(url)


async def allow_connections(url: str, allowed: bool) -> None:
    """Let connections to `url`'s database be made, or refuse them and end those open."""
    name = make_url(url).database
    server = await asyncpg.connect(libpq_url(postgres_server_url()), timeout=5)
    try:
        await server.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS {allowed}')
        if not allowed:
            await server.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
            )
    finally:
        await server.close()


@dataclass
class East:
    """The east's database, map and link to an in-process national brain."""

    national: NationalBrain
    sessions: async_sessionmaker[AsyncSession]
    live_map: LiveMap
    link: NationalLink


@asynccontextmanager
async def east_and_national(tmp_path: Path, east_url: str) -> AsyncIterator[East]:
    await upgrade_schema(east_url)
    database = create_engine(east_url)
    sessions = session_factory(database)
    async with sessions.begin() as session:
        await registry.seed_map(session, document=china_document())
    live_map = LiveMap(sessions, owner="east", restrict=True)
    await live_map.reload()
    national_settings = NationalSettings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'national.db'}",
        grpc_host="127.0.0.1",
        grpc_port=0,
    )
    try:
        async with running(national_settings) as national:
            assert national.server is not None
            link = NationalLink(
                [f"127.0.0.1:{national.server.port}"],
                settings=Settings(region="east", summary_interval_s=INTERVAL_S),
                security=PeerSecurity(),
                region_id="east",
                advertised_endpoint="127.0.0.1:1",
                live_map=live_map,
            )
            try:
                yield East(national, sessions, live_map, link)
            finally:
                await link.close()
    finally:
        await database.dispose()


@asynccontextmanager
async def in_background(work: Coroutine[Any, Any, None]) -> AsyncIterator["asyncio.Task[None]"]:
    task = asyncio.create_task(work)
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_link_hears_again_after_the_regions_database_comes_back(
    tmp_path: Path, east_url: str
) -> None:
    async with (
        east_and_national(tmp_path, east_url) as east,
        in_background(east.link.run()) as task,
    ):

        async def heard() -> int | None:
            region = east.national.directory.get("east")
            summary = None if region is None else region.summary
            return None if summary is None else summary.sequence

        await until(heard, "a summary of the east", timeout_s=10)
        await allow_connections(east_url, False)
        east.live_map.capacity_changed()  # the next summary reads the database
        await asyncio.sleep(INTERVAL_S * 5)
        during = await heard()
        assert during is not None
        assert not task.done()
        await allow_connections(east_url, True)

        async def newer() -> bool | None:
            last = await heard()
            return True if last is not None and last > during else None

        await until(newer, "a summary of the east after the outage", timeout_s=10)


async def test_the_tenancy_taken_while_the_regions_database_is_down_is_taken_after(
    tmp_path: Path, east_url: str
) -> None:
    async with east_and_national(tmp_path, east_url) as east:
        follow = FollowTenancy(
            sessions=east.sessions,
            national=east.link,
            forget_keys=lambda _: None,
            interval_s=INTERVAL_S,
            region="east",
        )
        async with in_background(east.link.run()), in_background(follow.run()) as task:
            await asyncio.wait_for(east.link.registered.wait(), timeout=10)
            await follow.once()
            await allow_connections(east_url, False)
            await east.link.change_tenancy(
                TenantCreated(tenant_id="acme", name="Acme"), actor="test"
            )
            await asyncio.sleep(INTERVAL_S * 5)  # rounds that cannot write it
            assert not task.done()
            await allow_connections(east_url, True)

            async def taken() -> bool | None:
                async with east.sessions() as session:
                    found = await tenants.get_tenant(session, tenant_id="acme")
                return True if found is not None else None

            await until(taken, "the tenant taken after the outage", timeout_s=10)
