"""The federation's tenancy log: the national brain records checked changes at versions in
order; a follower takes them as they stand, once, and authenticates on its own tables."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from cnbrain.domain.tenancy import (
    ApiKeyCreated,
    ApiKeyRevoked,
    QuotaSet,
    TenancyChange,
    TenantCreated,
    UserCreated,
    UserDisabled,
)
from cnbrain.storage import known_regions, tenancy_log, tenants
from cnbrain.storage.database import create_engine, session_factory, upgrade_schema
from cnbrain.storage.errors import LastAdmin, NotFoundError, TenancyConflict
from cnbrain.storage.known_regions import KnownRegion
from tests.databases import Sessions

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def follower(tmp_path: Path) -> AsyncIterator[Sessions]:
    """A second brain's database (SQLite), migrated and empty."""
    url = f"sqlite:///{tmp_path / 'follower.db'}"
    await upgrade_schema(url)
    engine = create_engine(url)
    yield session_factory(engine)
    await engine.dispose()


async def _record(sessions: Sessions, change: TenancyChange) -> int:
    async with sessions.begin() as session:
        version, recorded = await tenancy_log.record(session, change)
    assert recorded.at is not None
    return version


async def test_changes_are_checked_and_numbered_in_order(sessions: Sessions) -> None:
    _, token, digest = tenants.new_api_key()
    key_id = token.split(".", 1)[0].removeprefix("ck_")
    versions = [
        await _record(sessions, TenantCreated(tenant_id="acme", name="Acme")),
        await _record(
            sessions,
            UserCreated(user_id="alice", tenant_id="acme", name="Alice", role="tenant-user"),
        ),
        await _record(
            sessions, ApiKeyCreated(key_id=key_id, user_id="alice", secret_sha256=digest)
        ),
        await _record(sessions, QuotaSet(tenant_id="acme", limit_accelerators=8)),
    ]
    assert versions == [1, 2, 3, 4]

    refused: list[tuple[TenancyChange, type[Exception], str]] = [
        (TenantCreated(tenant_id="acme", name="Again"), TenancyConflict, "exists already"),
        (
            UserCreated(user_id="bob", tenant_id="nobody", name="Bob", role="tenant-user"),
            NotFoundError,
            "tenant 'nobody' does not exist",
        ),
        (
            ApiKeyCreated(key_id=key_id, user_id="alice", secret_sha256=digest),
            TenancyConflict,
            "exists already",
        ),
        (ApiKeyRevoked(key_id=key_id, user_id="carol"), NotFoundError, "does not exist"),
        (QuotaSet(tenant_id="nobody"), NotFoundError, "does not exist"),
    ]
    for change, error, words in refused:
        with pytest.raises(error, match=words):
            async with sessions.begin() as session:
                await tenancy_log.record(session, change)
    async with sessions() as session:
        assert await tenancy_log.latest_version(session) == 4
        assert [v for v, _ in await tenancy_log.changes_since(session, version=1, limit=2)] == [
            2,
            3,
        ]
        assert await tenants.authenticate(session, token=token) is not None


async def test_the_last_admin_and_a_disabled_user_are_refused(sessions: Sessions) -> None:
    await _record(sessions, UserCreated(user_id="root", tenant_id=None, name="r", role="admin"))
    with pytest.raises(LastAdmin):
        async with sessions.begin() as session:
            await tenancy_log.record(session, UserDisabled(user_id="root"))
    await _record(sessions, TenantCreated(tenant_id="acme", name="Acme"))
    await _record(
        sessions, UserCreated(user_id="bob", tenant_id="acme", name="Bob", role="tenant-user")
    )
    await _record(sessions, UserDisabled(user_id="bob"))
    _, _, digest = tenants.new_api_key()
    with pytest.raises(TenancyConflict, match="disabled"):
        async with sessions.begin() as session:
            await tenancy_log.record(
                session, ApiKeyCreated(key_id="k" * 16, user_id="bob", secret_sha256=digest)
            )


async def test_a_follower_takes_every_change_once_and_authenticates_alone(
    sessions: Sessions, follower: Sessions
) -> None:
    key_id, token, digest = tenants.new_api_key()
    await _record(sessions, TenantCreated(tenant_id="acme", name="Acme"))
    await _record(
        sessions, UserCreated(user_id="alice", tenant_id="acme", name="Alice", role="tenant-user")
    )
    await _record(sessions, ApiKeyCreated(key_id=key_id, user_id="alice", secret_sha256=digest))
    await _record(sessions, QuotaSet(tenant_id="acme", limit_accelerators=8))
    async with sessions() as session:
        changes = await tenancy_log.changes_since(session, version=0, limit=100)

    for _ in range(2):  # taking them twice changes nothing
        async with follower.begin() as session:
            for version, change in changes:
                assert await tenancy_log.take(session, version, change, region=None) is None
    async with follower() as session:
        assert await tenancy_log.latest_version(session) == 4
        found = await tenants.authenticate(session, token=token)
        quota = await tenants.get_quota(session, tenant_id="acme")
    assert found is not None and found[0].id == "alice"
    assert quota is not None and quota.limit_acc_milli == 8000

    await _record(sessions, ApiKeyRevoked(key_id=key_id, user_id="alice"))
    async with sessions() as session:
        [(version, revoked)] = await tenancy_log.changes_since(session, version=4, limit=100)
    async with follower.begin() as session:
        assert await tenancy_log.take(session, version, revoked, region=None) == "alice"
    async with follower() as session:
        assert await tenants.authenticate(session, token=token) is None
        [key] = await tenants.list_api_keys(session, user_id="alice")
    assert key.revoked_at == revoked.at


async def test_quotas_hold_at_the_level_and_in_the_regions_they_name(
    sessions: Sessions, follower: Sessions
) -> None:
    await _record(sessions, TenantCreated(tenant_id="acme", name="Acme"))
    async with sessions.begin() as session:
        await known_regions.save(session, KnownRegion("west", "127.0.0.1:1", frozenset({"NX"})))
    with pytest.raises(NotFoundError, match="'atlantis'"):
        await _record(sessions, QuotaSet(tenant_id="acme", region="atlantis", limit_cpu_m=1))
    with pytest.raises(NotFoundError, match="'hooli'"):
        await _record(sessions, QuotaSet(tenant_id="hooli", level="national", limit_cpu_m=1))
    sets = [
        QuotaSet(tenant_id="acme", limit_cpu_m=8000),
        QuotaSet(tenant_id="acme", region="west", limit_cpu_m=2000),
        QuotaSet(tenant_id="acme", level="national", limit_cpu_m=10_000, limit_accelerators=4),
    ]
    for change in sets:
        await _record(sessions, change)
    async with sessions() as session:
        national = await tenants.get_quota(session, tenant_id="acme")
        changes = await tenancy_log.changes_since(session, version=0, limit=100)
        assert await tenants.limited_tenants(session, ["acme", "x"], national=False) == {"acme"}
    assert national is not None
    assert (national.limit_cpu_m, national.limit_acc_milli) == (10_000, 4000), (
        "the national brain's own limits are the national ones"
    )

    limits: dict[str, tuple[int | None, int | None]] = {}
    for region in ("east", "west"):
        async with follower.begin() as session:
            for version, taken in changes:
                await tenancy_log.take(session, version, taken, region=region)
        async with follower() as session:
            quota = await tenants.get_quota(session, tenant_id="acme")
            assert await tenants.limited_tenants(session, ["acme"], national=True) == {"acme"}
        assert quota is not None
        assert (quota.national_cpu_m, quota.national_acc_milli) == (10_000, 4000)
        limits[region] = (quota.limit_cpu_m, quota.limit_acc_milli)
        async with follower.begin() as session:  # the next region starts from an empty row
            await tenants.set_quota(session, tenant_id="acme")
    assert limits == {"east": (8000, None), "west": (2000, None)}

    await _record(sessions, QuotaSet(tenant_id="acme", limit_cpu_m=6000))
    async with sessions() as session:
        [(version, everywhere)] = await tenancy_log.changes_since(session, version=4, limit=9)
    async with follower.begin() as session:
        await tenancy_log.take(session, version, everywhere, region="west")
        quota = await tenants.get_quota(session, tenant_id="acme")
    assert quota is not None and quota.limit_cpu_m == 6000, "a set for every region holds in west"
