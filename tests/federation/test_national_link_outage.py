"""A region's link to the national brain outlives an outage of the region's PostgreSQL: the
summaries it cannot make meanwhile are tried again, and once the database is back the
national brain (in-process, its gRPC on loopback) hears the region again."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
import pytest_asyncio
from sqlalchemy import make_url

from cnbrain.federation.live_map import LiveMap
from cnbrain.national.composition import running
from cnbrain.national.settings import NationalSettings
from cnbrain.netmap.china import china_document
from cnbrain.regional.federation import NationalLink
from cnbrain.regional.settings import Settings
from cnbrain.rpc.security import PeerSecurity
from cnbrain.storage import registry
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


async def test_the_link_hears_again_after_the_regions_database_comes_back(
    tmp_path: Path, east_url: str
) -> None:
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
        task = asyncio.create_task(link.run())

        async def heard() -> int | None:
            region = national.directory.get("east")
            summary = None if region is None else region.summary
            return None if summary is None else summary.sequence

        try:
            await until(heard, "a summary of the east", timeout_s=10)
            await allow_connections(east_url, False)
            live_map.capacity_changed()  # the next summary reads the database
            await asyncio.sleep(INTERVAL_S * 5)
            during = await heard()
            assert during is not None
            assert not task.done()
            await allow_connections(east_url, True)

            async def newer() -> bool | None:
                last = await heard()
                return True if last is not None and last > during else None

            await until(newer, "a summary of the east after the outage", timeout_s=10)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await link.close()
            await database.dispose()
