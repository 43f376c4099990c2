"""The embedded default (SQLite file, in-process cache) for a first run, and recovery of
requests an earlier stop left pending."""

from pathlib import Path

import pytest

from cnbrain.regional.app import create_app
from cnbrain.regional.settings import Settings
from cnbrain.storage import requests, tenants
from tests.regional.bodies import GPU_TRAINING
from tests.regional.brain_api import brain_settings, serving

pytestmark = pytest.mark.asyncio


async def test_first_run_on_sqlite_with_the_in_process_cache(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'brain.db'}", admin_token_file=tmp_path / "admin.token"
    )
    assert settings.redis_url is None
    async with serving(settings) as (_, client):
        token = (tmp_path / "admin.token").read_text().strip()
        auth = {"Authorization": f"Bearer {token}"}
        assert (
            await client.post("/v1/tenants", json={"id": "first", "name": "first"}, headers=auth)
        ).status_code == 201
        answer = await client.post(
            "/v1/requests", json={**GPU_TRAINING, "tenant": "first"}, headers=auth
        )
        assert answer.status_code == 201, answer.text
        assert answer.json()["state"] == "placed"
        assert (await client.get("/readyz")).json()["sites"] == 96
    assert (tmp_path / "admin.token").stat().st_mode & 0o777 == 0o600


async def test_a_pending_request_is_placed_at_the_next_start(tmp_path: Path) -> None:
    settings = brain_settings(f"sqlite:///{tmp_path / 'brain.db'}", None, tmp_path)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        brain = app.state.brain
        async with brain.sessions.begin() as session:
            await tenants.create_tenant(session, tenant_id="late", name="late")
            user = await tenants.create_user(
                session, name="u", role="tenant-user", tenant_id="late"
            )
            await requests.insert_requests(
                session,
                [
                    requests.NewRequest(
                        request_id="req-left-pending",
                        tenant_id="late",
                        user_id=user.id,
                        body={**GPU_TRAINING, "id": "req-left-pending", "tenant": "late"},
                    )
                ],
            )
    again = create_app(settings)
    async with again.router.lifespan_context(again), again.state.brain.sessions() as session:
        record = await requests.get_request(
            session, tenant_id="late", request_id="req-left-pending"
        )
    assert record is not None and record.state == "placed" and record.site_id


async def test_the_rate_limit_answers_429_with_retry_after(tmp_path: Path) -> None:
    settings = brain_settings(
        f"sqlite:///{tmp_path / 'brain.db'}", None, tmp_path, rate_limit_per_minute=3
    )
    async with serving(settings) as (_, client):
        assert settings.admin_token is not None
        auth = {"Authorization": f"Bearer {settings.admin_token.get_secret_value()}"}
        await client.post("/v1/tenants", json={"id": "busy", "name": "busy"}, headers=auth)
        body = {**GPU_TRAINING, "tenant": "busy"}
        codes = [
            (await client.post("/v1/quotes", json=body, headers=auth)).status_code for _ in range(4)
        ]
        assert codes == [200, 200, 200, 429]
        refused = await client.post("/v1/requests", json=body, headers=auth)
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.headers["content-type"].startswith("application/problem+json")
