"""A regional brain on real PostgreSQL and Redis, driven in-process over ASGI.

One brain (and database) per test module; each test makes its own tenants, so tests do not
see each other's requests. The helpers are in brain_api.py.
"""

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest_asyncio
from brain_api import Api, brain_settings

from cnbrain.regional.app import create_app
from databases import create_postgres_database, drop_postgres_database, require_redis


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def api(tmp_path_factory: Any) -> AsyncIterator[Api]:
    database = await create_postgres_database("cnbrain_api")
    redis = await require_redis()
    app = create_app(brain_settings(database, redis, tmp_path_factory.mktemp("brain")))
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://brain") as client:
                yield Api(client=client, brain=app.state.brain, cases=app.state.use_cases)
    finally:
        await drop_postgres_database(database)
