"""Replicas in one process on one PostgreSQL database and Redis: a reservation made by one
reaches the other's snapshot through the capacity bus."""

import asyncio
from pathlib import Path

import httpx
import pytest

from cnbrain.regional.app import create_app
from tests.databases import create_postgres_database, drop_postgres_database, require_redis
from tests.regional.bodies import GPU_TRAINING
from tests.regional.brain_api import ADMIN_TOKEN, brain_settings

pytestmark = pytest.mark.asyncio


async def test_a_capacity_event_refreshes_the_other_replica(tmp_path: Path) -> None:
    database = await create_postgres_database("cnbrain_bus")
    redis = await require_redis()
    first = brain_settings(database, redis, tmp_path, instance_id="one")
    second = first.model_copy(update={"instance_id": "two"})
    app_one, app_two = create_app(first), create_app(second)
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    try:
        async with (
            app_one.router.lifespan_context(app_one),
            app_two.router.lifespan_context(app_two),
        ):
            one, two = app_one.state.brain, app_two.state.brain
            before, _ = await two.live_map.snapshot()
            transport = httpx.ASGITransport(app=app_one)
            async with httpx.AsyncClient(transport=transport, base_url="http://one") as client:
                await client.post("/v1/tenants", json={"id": "bus", "name": "bus"}, headers=auth)
                placed = await client.post(
                    "/v1/requests", json={**GPU_TRAINING, "tenant": "bus"}, headers=auth
                )
            assert placed.json()["state"] == "placed"
            for _ in range(100):
                if two.live_map.cached_snapshot is None:
                    break
                await asyncio.sleep(0.02)
            after, fresh = await two.live_map.snapshot()
            assert fresh
            assert int(before.free_acc.sum()) - int(after.free_acc.sum()) == 8000
            mine, _ = await one.live_map.snapshot()
            assert (mine.free_acc == after.free_acc).all()
    finally:
        await drop_postgres_database(database)
