"""A regional brain in the test's process: the admin key, brain settings, `serving` (the brain
started and a client of it over ASGI), and `Api`, that client with the calls tests make.
"""

import contextlib
import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from pydantic import SecretStr

from cnbrain.regional.app import create_app
from cnbrain.regional.settings import Settings
from cnbrain.regional.use_cases import RequestUseCases
from cnbrain.storage import ledger_store

ADMIN_TOKEN = f"ck_admin{secrets.token_hex(4)}.{secrets.token_urlsafe(24)}"


@dataclass
class Api:
    """A client of a brain (`brain` is its `Brain` object), calling as the admin or with a key."""

    client: httpx.AsyncClient
    brain: Any
    cases: RequestUseCases | None = None
    """The brain's use cases, for tests that call them below the API."""
    metrics_port: int | None = None
    """The port of the brain's metrics listener, when it has one (`metrics_port` set)."""

    @property
    def use_cases(self) -> RequestUseCases:
        """The brain's use cases; only for a client made with them."""
        assert self.cases is not None, "this client was made without the brain's use cases"
        return self.cases

    def auth(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    async def as_admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return await self.client.request(method, path, headers=self.auth(ADMIN_TOKEN), **kwargs)

    async def call(self, token: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {**self.auth(token), **kwargs.pop("headers", {})}
        return await self.client.request(method, path, headers=headers, **kwargs)

    async def user(self, *, role: str, tenant: str | None) -> str:
        """A new user of `role` (in `tenant`) and their API key."""
        made = await self.as_admin(
            "POST", "/v1/users", json={"name": role, "role": role, "tenant": tenant}
        )
        assert made.status_code == 201, made.text
        key = await self.as_admin("POST", f"/v1/users/{made.json()['id']}/api-keys")
        assert key.status_code == 201, key.text
        token: str = key.json()["token"]
        return token

    async def invariants(self) -> None:
        """Check the brain's ledger: every used amount is what its reservations hold."""
        async with self.brain.sessions() as session:
            await ledger_store.check_invariants(session)

    async def new_tenant(self, prefix: str) -> str:
        """A new tenant, without users; its id."""
        tenant_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
        made = await self.as_admin("POST", "/v1/tenants", json={"id": tenant_id, "name": tenant_id})
        assert made.status_code == 201, made.text
        return tenant_id

    async def tenant(self, prefix: str = "t") -> tuple[str, str, str]:
        """A new tenant: (id, tenant-admin key, tenant-user key)."""
        tenant_id = await self.new_tenant(prefix)
        return (
            tenant_id,
            await self.user(role="tenant-admin", tenant=tenant_id),
            await self.user(role="tenant-user", tenant=tenant_id),
        )

    async def tenant_user(self, prefix: str = "x") -> tuple[str, str]:
        """A new tenant and the API key of one of its tenant users."""
        tenant_id = await self.new_tenant(prefix)
        return tenant_id, await self.user(role="tenant-user", tenant=tenant_id)


def detail_of(response: httpx.Response, status: int, field: str | None = None) -> str:
    """The `detail` of the problem document `response` must be, with `status`, and, when
    `field` is given, an error naming that field only."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    if field is not None:
        assert [e["field"] for e in problem["errors"]] == [field], problem
    detail: str = problem["detail"]
    return detail


def brain_settings(database_url: str, redis_url: str | None, tmp: Path, **extra: Any) -> Settings:
    return Settings(
        database_url=database_url,
        redis_url=redis_url,
        admin_token=SecretStr(ADMIN_TOKEN),
        admin_token_file=tmp / "admin.token",
        bus_namespace=f"test-{uuid.uuid4().hex[:10]}",
        **extra,
    )


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The brain of `settings` started in this process (its lifespan run), and a client of it
    over ASGI; stopped afterwards."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://brain") as client:
            yield app, client
