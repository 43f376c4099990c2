"""Tenants, users and roles, API keys (only hashes stored) and quotas."""

import hashlib

import pytest
from sqlalchemy import select

from cnbrain.storage import tenants
from cnbrain.storage.errors import LastAdmin, NotFoundError, TenantError
from cnbrain.storage.models import ApiKey, Quota
from tests.databases import Sessions

pytestmark = pytest.mark.asyncio


async def _acme(sessions: Sessions) -> str:
    """Tenant acme with user alice; returns a token of alice's."""
    async with sessions.begin() as session:
        await tenants.create_tenant(session, tenant_id="acme", name="Acme")
        await tenants.create_user(
            session, user_id="alice", name="Alice", role="tenant-user", tenant_id="acme"
        )
        return await tenants.create_api_key(session, user_id="alice")


async def test_tenants_come_with_an_unlimited_quota(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        tenant = await tenants.create_tenant(session, name="Generated")
        await tenants.create_tenant(session, tenant_id="acme", name="Acme")
        with pytest.raises(TenantError, match="tenant 'acme' exists already"):
            await tenants.create_tenant(session, tenant_id="acme", name="Again")
        with pytest.raises(TenantError, match="tenant id 'bad id!'"):
            await tenants.create_tenant(session, tenant_id="bad id!", name="Bad")
    assert tenant.id.startswith("t-")
    async with sessions() as session:
        assert [t.id for t in await tenants.list_tenants(session)] == sorted(["acme", tenant.id])
        found = await tenants.get_tenant(session, tenant_id="acme")
        quota = await tenants.get_quota(session, tenant_id="acme")
        assert await tenants.get_tenant(session, tenant_id="nobody") is None
    assert found is not None and found.name == "Acme"
    assert quota is not None and quota.limit_cpu_m is None and quota.active_requests == 0


async def test_roles_need_or_refuse_a_tenant(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        assert not await tenants.has_users(session)
        await tenants.create_tenant(session, tenant_id="acme", name="Acme")
        admin = await tenants.create_user(session, name="Root", role="admin")
        boss = await tenants.create_user(
            session, name="Boss", role="tenant-admin", tenant_id="acme"
        )
        assert await tenants.has_users(session)
        with pytest.raises(TenantError, match="role 'tenant-user' needs a tenant"):
            await tenants.create_user(session, name="x", role="tenant-user")
        with pytest.raises(TenantError, match="role 'operator' belongs to no tenant"):
            await tenants.create_user(session, name="x", role="operator", tenant_id="acme")
        with pytest.raises(TenantError, match="role 'root' is not one of"):
            await tenants.create_user(session, name="x", role="root")
        with pytest.raises(NotFoundError, match="tenant 'nobody'"):
            await tenants.create_user(session, name="x", role="tenant-user", tenant_id="nobody")
    assert admin.tenant_id is None and boss.tenant_id == "acme"
    async with sessions() as session:
        assert [u.id for u in await tenants.list_users(session, tenant_id="acme")] == [boss.id]
        assert len(await tenants.list_users(session)) == 2


async def test_a_token_authenticates_its_user(sessions: Sessions) -> None:
    token = await _acme(sessions)
    assert token.startswith("ck_")
    async with sessions() as session:
        found = await tenants.authenticate(session, token=token)
    assert found is not None
    user, key = found
    assert (user.id, user.role, user.tenant_id) == ("alice", "tenant-user", "acme")
    assert key.id == tenants.api_key_id(token)


async def test_only_the_hash_of_the_secret_is_stored(sessions: Sessions) -> None:
    token = await _acme(sessions)
    key_id, secret = token.removeprefix("ck_").split(".", 1)
    async with sessions() as session:
        (row,) = (await session.execute(select(ApiKey))).scalars().all()
    assert row.id == key_id
    assert row.secret_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in {str(value) for value in vars(row).values()}


@pytest.mark.parametrize(
    "forge",
    [
        lambda token: token[:-2] + ("AA" if not token.endswith("AA") else "BB"),
        lambda token: token.split(".")[0] + ".",
        lambda token: token.replace("ck_", "xx_"),
        lambda token: "ck_0000000000000000." + token.split(".", 1)[1],
        lambda token: "",
        lambda token: "ck_short.secret",
    ],
)
async def test_wrong_or_malformed_tokens_fail(sessions: Sessions, forge: object) -> None:
    token = await _acme(sessions)
    async with sessions() as session:
        assert await tenants.authenticate(session, token=forge(token)) is None  # type: ignore[operator]


async def test_revoked_keys_fail(sessions: Sessions) -> None:
    token = await _acme(sessions)
    key_id = tenants.api_key_id(token)
    assert key_id is not None
    async with sessions.begin() as session:
        await tenants.revoke_api_key(session, key_id=key_id)
        await tenants.revoke_api_key(session, key_id=key_id)
        with pytest.raises(NotFoundError):
            await tenants.revoke_api_key(session, key_id="ffffffffffffffff")
    async with sessions() as session:
        assert await tenants.authenticate(session, token=token) is None
        (key,) = await tenants.list_api_keys(session, user_id="alice")
    assert key.revoked_at is not None


async def test_a_key_is_revoked_only_through_its_own_user(sessions: Sessions) -> None:
    token = await _acme(sessions)
    key_id = tenants.api_key_id(token)
    assert key_id is not None
    async with sessions.begin() as session:
        await tenants.create_user(
            session, user_id="bob", name="Bob", role="tenant-user", tenant_id="acme"
        )
        with pytest.raises(NotFoundError):
            await tenants.revoke_api_key(session, key_id=key_id, user_id="bob")
    async with sessions() as session:
        assert await tenants.authenticate(session, token=token) is not None
    async with sessions.begin() as session:
        revoked = await tenants.revoke_api_key(session, key_id=key_id, user_id="alice")
    assert revoked.revoked_at is not None


async def test_a_disabled_users_keys_all_fail(sessions: Sessions) -> None:
    token = await _acme(sessions)
    async with sessions.begin() as session:
        second = await tenants.create_api_key(session, user_id="alice")
        disabled = await tenants.disable_user(session, user_id="alice")
        first_time = disabled.disabled_at
        assert (await tenants.disable_user(session, user_id="alice")).disabled_at == first_time
        with pytest.raises(NotFoundError):
            await tenants.disable_user(session, user_id="nobody")
    assert first_time is not None
    async with sessions() as session:
        assert await tenants.authenticate(session, token=token) is None
        assert await tenants.authenticate(session, token=second) is None


async def test_the_last_active_admin_cannot_be_disabled(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        for user_id in ("root", "second"):
            await tenants.create_user(session, user_id=user_id, name=user_id, role="admin")
        token = await tenants.create_api_key(session, user_id="root")
    async with sessions.begin() as session:
        await tenants.disable_user(session, user_id="second")
    async with sessions.begin() as session:
        with pytest.raises(LastAdmin, match="'root' is the last active admin"):
            await tenants.disable_user(session, user_id="root")
    async with sessions() as session:
        assert await tenants.authenticate(session, token=token) is not None


async def test_a_chosen_token_can_be_installed(sessions: Sessions) -> None:
    await _acme(sessions)
    chosen = "ck_0123456789abcdef." + "s" * 40
    async with sessions.begin() as session:
        assert await tenants.create_api_key(session, user_id="alice", token=chosen) == chosen
        with pytest.raises(TenantError, match="must look like"):
            await tenants.create_api_key(session, user_id="alice", token="ck_1.short")
    async with sessions() as session:
        found = await tenants.authenticate(session, token=chosen)
    assert found is not None and found[0].id == "alice"


async def test_quotas_are_set_and_read(sessions: Sessions) -> None:
    await _acme(sessions)
    async with sessions.begin() as session:
        await tenants.set_quota(session, tenant_id="acme", limit_cpu_m=64_000, limit_mbps=10_000)
        with pytest.raises(TenantError, match="limit_accelerators must not be negative"):
            await tenants.set_quota(session, tenant_id="acme", limit_accelerators=-1)
        with pytest.raises(NotFoundError, match="tenant 'nobody'"):
            await tenants.set_quota(session, tenant_id="nobody")
    async with sessions() as session:
        quota = await tenants.get_quota(session, tenant_id="acme")
        assert await tenants.get_quota(session, tenant_id="nobody") is None
    assert quota is not None
    assert (quota.limit_cpu_m, quota.limit_mbps, quota.limit_mem_mib) == (64_000, 10_000, None)
    async with sessions.begin() as session:
        await tenants.set_quota(session, tenant_id="acme")
    async with sessions() as session:
        rows = (await session.execute(select(Quota))).scalars().all()
    assert [(q.tenant_id, q.limit_cpu_m) for q in rows] == [("acme", None)]
