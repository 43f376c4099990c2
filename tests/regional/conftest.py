"""A regional brain on real PostgreSQL and Redis, driven in-process over ASGI.

One brain (and database) per test module; each test makes its own tenants, so tests do not
see each other's requests. The helpers are in brain_api.py.
"""

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from tests.databases import create_postgres_database, drop_postgres_database, require_redis
from tests.regional.brain_api import Api, brain_settings, serving


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def api(tmp_path_factory: Any) -> AsyncIterator[Api]:
    database = await create_postgres_database("cnbrain_api")
    redis = await require_redis()
    settings = brain_settings(database, redis, tmp_path_factory.mktemp("brain"))
    try:
        async with serving(settings) as (app, client):
            yield Api(client=client, brain=app.state.brain, cases=app.state.brain.requests)
    finally:
        await drop_postgres_database(database)
