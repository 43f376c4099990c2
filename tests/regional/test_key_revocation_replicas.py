"""Two replicas in one process on one PostgreSQL database and Redis: a key revoked (or a user
disabled) on one stops working on the other within the documented delay, and the last
active admin cannot be disabled."""

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
import pytest_asyncio

from cnbrain.regional.app import create_app
from cnbrain.regional.authentication import AUTH_CACHE_S
from cnbrain.storage import tenants
from cnbrain.storage.database import create_engine, session_factory
from tests.databases import create_postgres_database, drop_postgres_database, require_redis
from tests.regional.brain_api import ADMIN_TOKEN, brain_settings

pytestmark = pytest.mark.asyncio(loop_scope="module")


@dataclass(frozen=True)
class Replicas:
    one: httpx.AsyncClient
    two: httpx.AsyncClient
    database: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def replicas(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Replicas]:
    database = await create_postgres_database("cnbrain_revocation")
    redis = await require_redis()
    first = brain_settings(database, redis, tmp_path_factory.mktemp("revocation"))
    apps = (
        create_app(first.model_copy(update={"instance_id": "one"})),
        create_app(first.model_copy(update={"instance_id": "two"})),
    )
    try:
        async with (
            apps[0].router.lifespan_context(apps[0]),
            apps[1].router.lifespan_context(apps[1]),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=apps[0]), base_url="http://one"
            ) as one,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=apps[1]), base_url="http://two"
            ) as two,
        ):
            yield Replicas(one, two, database)
    finally:
        await drop_postgres_database(database)


async def user_of(database: str, token: str) -> str:
    """The id of the user whose key `token` is."""
    engine = create_engine(database)
    try:
        async with session_factory(engine)() as session:
            found = await tenants.authenticate(session, token=token)
    finally:
        await engine.dispose()
    assert found is not None
    return found[0].id


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def new_key(
    client: httpx.AsyncClient, *, role: str, tenant: str | None
) -> tuple[str, str, str]:
    """(user id, key id, token) of a new user, made by the first admin."""
    user = await client.post(
        "/v1/users", json={"name": role, "role": role, "tenant": tenant}, headers=auth(ADMIN_TOKEN)
    )
    assert user.status_code == 201, user.text
    key = await client.post(f"/v1/users/{user.json()['id']}/api-keys", headers=auth(ADMIN_TOKEN))
    return user.json()["id"], key.json()["id"], key.json()["token"]


async def status(client: httpx.AsyncClient, token: str) -> int:
    return (await client.get("/v1/requests", headers=auth(token))).status_code


async def refused_within(client: httpx.AsyncClient, token: str, bound_s: float) -> float:
    """Seconds until `client` answers 401 to `token`; fails the test beyond `bound_s`."""
    start = time.monotonic()
    while await status(client, token) != 401:
        assert time.monotonic() - start < bound_s, f"still accepted after {bound_s} s"
        await asyncio.sleep(0.25)
    return time.monotonic() - start


async def test_revoking_and_disabling_reach_the_other_replica_in_time(replicas: Replicas) -> None:
    one, two = replicas.one, replicas.two
    tenant = await one.post(
        "/v1/tenants", json={"id": "rv", "name": "rv"}, headers=auth(ADMIN_TOKEN)
    )
    assert tenant.status_code == 201, tenant.text
    revoked_user, key_id, revoked = await new_key(one, role="tenant-user", tenant="rv")
    disabled_user, _, disabled = await new_key(one, role="tenant-user", tenant="rv")
    for token in (revoked, disabled):  # both replicas verified them: both cache them
        assert await status(one, token) == 200 and await status(two, token) == 200
    answer = await one.delete(
        f"/v1/users/{revoked_user}/api-keys/{key_id}", headers=auth(ADMIN_TOKEN)
    )
    assert answer.status_code == 200, answer.text
    answer = await one.post(f"/v1/users/{disabled_user}/disable", headers=auth(ADMIN_TOKEN))
    assert answer.status_code == 200, answer.text
    assert await status(one, revoked) == 401 and await status(one, disabled) == 401
    bound = AUTH_CACHE_S + 1.0
    await asyncio.gather(refused_within(two, revoked, bound), refused_within(two, disabled, bound))


async def test_the_last_active_admin_cannot_be_disabled(replicas: Replicas) -> None:
    one, two = replicas.one, replicas.two
    second, _, second_token = await new_key(one, role="admin", tenant=None)
    first = await user_of(replicas.database, ADMIN_TOKEN)
    answer = await two.post(f"/v1/users/{first}/disable", headers=auth(second_token))
    assert answer.status_code == 200, answer.text
    assert await status(two, ADMIN_TOKEN) == 401
    itself = await one.post(f"/v1/users/{second}/disable", headers=auth(second_token))
    assert itself.status_code == 409, itself.text
    assert itself.headers["content-type"] == "application/problem+json"
    assert "last active admin" in itself.json()["detail"]
    assert await status(one, second_token) == 200 and await status(two, second_token) == 200
    audit = await one.get("/v1/audit", params={"object_type": "user"}, headers=auth(second_token))
    disabled = [e for e in audit.json()["items"] if e["action"] == "user.disabled"]
    assert [(e["object_id"], e["actor"]) for e in disabled if e["object_id"] == first] == [
        (first, second)
    ]
