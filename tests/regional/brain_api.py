"""Helpers of the regional brain's tests: the admin key, brain settings, and `Api`, a client of
a brain driven in-process over ASGI.

They live here rather than in conftest.py so that test modules can import them by a name no
other test directory uses.
"""

import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from cnbrain.regional.settings import Settings

ADMIN_TOKEN = f"ck_admin{secrets.token_hex(4)}.{secrets.token_urlsafe(24)}"


@dataclass
class Api:
    client: httpx.AsyncClient
    brain: Any
    cases: Any = None

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

    async def tenant(self, prefix: str = "t") -> tuple[str, str, str]:
        """A new tenant: (id, tenant-admin key, tenant-user key)."""
        tenant_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
        made = await self.as_admin("POST", "/v1/tenants", json={"id": tenant_id, "name": tenant_id})
        assert made.status_code == 201, made.text
        return (
            tenant_id,
            await self.user(role="tenant-admin", tenant=tenant_id),
            await self.user(role="tenant-user", tenant=tenant_id),
        )


def brain_settings(database_url: str, redis_url: str | None, tmp: Path, **extra: Any) -> Settings:
    return Settings(
        database_url=database_url,
        redis_url=redis_url,
        admin_token=SecretStr(ADMIN_TOKEN),
        admin_token_file=tmp / "admin.token",
        bus_namespace=f"test-{uuid.uuid4().hex[:10]}",
        **extra,
    )
