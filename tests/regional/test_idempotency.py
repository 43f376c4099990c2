"""An Idempotency-Key names one request: the same request again returns the first answer, a
different one is refused (422) and leaves the first untouched, whether the cache or only the
database still knows the key."""

from typing import Any

import pytest
from redis.asyncio import Redis

from tests.regional.bodies import GPU_TRAINING, LOCAL_CPU
from tests.regional.brain_api import ADMIN_TOKEN, Api

pytestmark = pytest.mark.asyncio(loop_scope="module")

REORDERED = dict(reversed(list(GPU_TRAINING.items())))
"""GPU_TRAINING with its keys in another order: the same request."""


async def forget_keys_in_cache(api: Api) -> None:
    """Drop every idempotency key from Redis: only the database's unique key remembers them."""
    client = Redis.from_url(api.brain.settings.redis_url)
    try:
        pattern = f"cnbrain:{api.brain.settings.bus_namespace}:*"
        keys = [k async for k in client.scan_iter(match=pattern) if b":idem:" in k]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


async def submissions(api: Api, token: str, tenant: str) -> list[dict[str, Any]]:
    listed = await api.call(token, "GET", "/v1/requests")
    return [item for item in listed.json()["items"] if item["tenant"] == tenant]


async def check_key_names_one_request(
    api: Api, token: str, tenant: str, extra: dict[str, Any], *, cache_forgets: bool
) -> None:
    headers = {"Idempotency-Key": f"job-{cache_forgets}-{tenant}"}
    first = await api.call(
        token, "POST", "/v1/requests", json={**GPU_TRAINING, **extra}, headers=headers
    )
    assert first.status_code == 201, first.text
    if cache_forgets:
        await forget_keys_in_cache(api)
    other = await api.call(
        token, "POST", "/v1/requests", json={**LOCAL_CPU, **extra}, headers=headers
    )
    assert other.status_code == 422, other.text
    problem = other.json()
    assert other.headers["content-type"] == "application/problem+json"
    assert problem["errors"][0]["field"] == "Idempotency-Key"
    assert first.json()["id"] in problem["detail"]
    if cache_forgets:
        await forget_keys_in_cache(api)
    same = await api.call(
        token, "POST", "/v1/requests", json={**REORDERED, **extra}, headers=headers
    )
    assert same.status_code == 200, same.text
    assert same.json() == first.json()
    (only,) = await submissions(api, ADMIN_TOKEN, tenant)
    assert only == first.json()
    quota = (await api.as_admin("GET", f"/v1/tenants/{tenant}/quota")).json()
    assert quota["used_accelerators"] == 8 and quota["used_active_requests"] == 1


@pytest.mark.parametrize("cache_forgets", [False, True], ids=["cache", "database"])
async def test_a_tenants_key_names_one_request(api: Api, cache_forgets: bool) -> None:
    tenant, _, user = await api.tenant()
    await check_key_names_one_request(api, user, tenant, {}, cache_forgets=cache_forgets)


@pytest.mark.parametrize("cache_forgets", [False, True], ids=["cache", "database"])
async def test_a_key_of_staff_naming_a_tenant_names_one_request(
    api: Api, cache_forgets: bool
) -> None:
    tenant, _, _ = await api.tenant()
    await check_key_names_one_request(
        api, ADMIN_TOKEN, tenant, {"tenant": tenant}, cache_forgets=cache_forgets
    )
