"""The tenant a benchmark submits as: made through the operator API, with its own API key."""

import uuid

import httpx


async def bench_tenant(client: httpx.AsyncClient, staff: dict[str, str]) -> tuple[str, str]:
    """A new tenant `bench-...` with a tenant-user and that user's API key, made with the
    operator headers `staff`; returns (tenant id, API key). Submissions with the key go the
    way a tenant's own do (no staff lookup of the tenant named in the body)."""
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    (
        await client.post("/v1/tenants", json={"id": tenant, "name": tenant}, headers=staff)
    ).raise_for_status()
    user = (
        (
            await client.post(
                "/v1/users",
                json={"name": "bench", "role": "tenant-user", "tenant": tenant},
                headers=staff,
            )
        )
        .raise_for_status()
        .json()
    )
    key = (
        (await client.post(f"/v1/users/{user['id']}/api-keys", headers=staff))
        .raise_for_status()
        .json()
    )
    return tenant, str(key["token"])
