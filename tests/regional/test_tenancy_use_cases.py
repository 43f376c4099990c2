"""The administration use cases below the REST edge, on PostgreSQL and SQLite: tenancy (who
may manage tenants, quotas, users and keys, what is audited, which cached keys are
forgotten), usage reports (scope and period) and the audit log (scope)."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine

from cnbrain.domain.errors import Conflict, Forbidden, Invalid, NotFound
from cnbrain.regional.schemas import QuotaBody, TenantCreate, UserCreate
from cnbrain.regional.security import Principal, Role
from cnbrain.regional.use_cases.admin import AdminUseCases
from cnbrain.regional.use_cases.usage_reports import DEFAULT_PERIOD
from cnbrain.storage import audit, tenants
from cnbrain.storage.database import session_factory
from tests.databases import Sessions
from tests.migrated_databases import database_url, engine, postgres_url, sqlite_url

__all__ = ["database_url", "engine", "postgres_url", "sqlite_url"]

pytestmark = pytest.mark.asyncio

ADMIN = Principal(user_id="u-root", role=Role.ADMIN, tenant_id=None)


@pytest_asyncio.fixture
async def sessions(engine: AsyncEngine) -> Sessions:
    """The database's sessions, every table emptied first; with the admin `ADMIN` names."""
    factory = session_factory(engine)
    async with factory.begin() as session:
        await tenants.create_user(session, name="root", role="admin", user_id=ADMIN.user_id)
    return factory


@dataclass
class Admin:
    cases: AdminUseCases
    forgotten: list[str]
    """The user ids whose cached keys the use cases asked to forget, in order."""


@pytest.fixture
def admin(sessions: Sessions) -> Admin:
    forgotten: list[str] = []
    cases = AdminUseCases.build(sessions=sessions, forget_keys=forgotten.append)
    return Admin(cases=cases, forgotten=forgotten)


async def _tenant(admin: Admin, tenant_id: str) -> None:
    await admin.cases.tenants.create_tenant(ADMIN, TenantCreate(id=tenant_id, name=tenant_id))


async def _member(admin: Admin, role: Role, tenant: str | None) -> Principal:
    """A new user of `role`, made by the admin, as the principal its keys authenticate."""
    user = await admin.cases.users.create_user(
        ADMIN, UserCreate(name=str(role), role=role, tenant=tenant)
    )
    return Principal(user_id=user.id, role=role, tenant_id=tenant)


async def _actions(sessions: Sessions) -> list[str]:
    async with sessions() as session:
        entries, _ = await audit.list_entries(session, limit=100)
    return [entry.action for entry in reversed(entries)]


async def test_only_staff_create_and_list_tenants_and_each_is_audited(
    admin: Admin, sessions: Sessions
) -> None:
    made = await admin.cases.tenants.create_tenant(ADMIN, TenantCreate(id="acme", name="Acme"))
    assert (made.id, made.name) == ("acme", "Acme")
    with pytest.raises(Conflict, match="'acme' exists already"):
        await _tenant(admin, "acme")
    boss = await _member(admin, Role.TENANT_ADMIN, "acme")
    with pytest.raises(Forbidden, match="admin, operator"):
        await admin.cases.tenants.create_tenant(boss, TenantCreate(id="other", name="Other"))
    with pytest.raises(Forbidden):
        await admin.cases.tenants.list_tenants(boss)
    assert [t.id for t in await admin.cases.tenants.list_tenants(ADMIN)] == ["acme"]
    assert await _actions(sessions) == ["tenant.created", "user.created"]


async def test_a_tenant_sees_only_its_own_tenant_and_quota(admin: Admin) -> None:
    await _tenant(admin, "acme")
    await _tenant(admin, "umbrella")
    user = await _member(admin, Role.TENANT_USER, "acme")
    assert (await admin.cases.tenants.get_tenant(user, "acme")).id == "acme"
    for tenant_id in ("umbrella", "nobody"):
        with pytest.raises(NotFound, match=f"tenant '{tenant_id}' does not exist"):
            await admin.cases.tenants.get_tenant(user, tenant_id)
        with pytest.raises(NotFound):
            await admin.cases.tenants.get_quota(user, tenant_id)
    with pytest.raises(NotFound):
        await admin.cases.tenants.get_tenant(ADMIN, "nobody")


async def test_a_quota_is_set_by_staff_in_the_stored_units_and_read_back(
    admin: Admin, sessions: Sessions
) -> None:
    await _tenant(admin, "acme")
    body = QuotaBody(cpu_cores=2.5, memory_gib=3, accelerators=4, bandwidth_gbps=1.5)
    quota = await admin.cases.tenants.set_quota(ADMIN, "acme", body)
    assert (quota.cpu_cores, quota.memory_gib, quota.accelerators) == (2.5, 3, 4)
    assert (quota.bandwidth_gbps, quota.active_requests, quota.used_cpu_cores) == (1.5, None, 0)
    async with sessions() as session:
        stored = await tenants.get_quota(session, tenant_id="acme")
    assert stored is not None
    assert (stored.limit_cpu_m, stored.limit_mem_mib, stored.limit_mbps) == (2500, 3072, 1500)
    user = await _member(admin, Role.TENANT_USER, "acme")
    assert await admin.cases.tenants.get_quota(user, "acme") == quota
    with pytest.raises(Forbidden):
        await admin.cases.tenants.set_quota(user, "acme", QuotaBody())
    with pytest.raises(NotFound):
        await admin.cases.tenants.set_quota(ADMIN, "nobody", QuotaBody())
    with pytest.raises(Invalid, match=r"^national: a standalone brain has no national quota"):
        await admin.cases.tenants.set_quota(ADMIN, "acme", QuotaBody(), national=True)
    with pytest.raises(Invalid, match=r"^region: a standalone brain has no other regions"):
        await admin.cases.tenants.set_quota(ADMIN, "acme", QuotaBody(), region="west")
    assert (await _actions(sessions)).count("quota.set") == 1
    assert quota.region is None and quota.national is None
    with pytest.raises(NotFound, match="no national quota"):
        await admin.cases.tenants.get_national_quota(ADMIN, "acme")


async def test_who_may_create_which_users(admin: Admin) -> None:
    await _tenant(admin, "acme")
    await _tenant(admin, "umbrella")
    operator = await _member(admin, Role.OPERATOR, None)
    boss = await _member(admin, Role.TENANT_ADMIN, "acme")
    user = await _member(admin, Role.TENANT_USER, "acme")
    users = admin.cases.users
    with pytest.raises(Invalid) as staff_with_tenant:
        await users.create_user(ADMIN, UserCreate(name="o", role=Role.OPERATOR, tenant="acme"))
    with pytest.raises(Invalid) as tenant_role_without:
        await users.create_user(ADMIN, UserCreate(name="u", role=Role.TENANT_USER))
    assert staff_with_tenant.value.field == tenant_role_without.value.field == "tenant"
    with pytest.raises(Forbidden):
        await users.create_user(operator, UserCreate(name="a", role=Role.ADMIN))
    with pytest.raises(Forbidden):
        await users.create_user(
            boss, UserCreate(name="u", role=Role.TENANT_USER, tenant="umbrella")
        )
    with pytest.raises(Forbidden):
        await users.create_user(user, UserCreate(name="u", role=Role.TENANT_USER, tenant="acme"))
    with pytest.raises(NotFound, match="tenant 'nobody'"):
        await users.create_user(ADMIN, UserCreate(name="u", role=Role.TENANT_USER, tenant="nobody"))
    made = await users.create_user(
        boss, UserCreate(name="u", role=Role.TENANT_ADMIN, tenant="acme")
    )
    assert (made.role, made.tenant, made.disabled_at) == (Role.TENANT_ADMIN, "acme", None)
    assert (
        await users.create_user(
            operator, UserCreate(name="t", role=Role.TENANT_USER, tenant="umbrella")
        )
    ).tenant == "umbrella"


async def test_a_revoked_key_is_forgotten_after_it_is_revoked_and_named_as_its_token(
    admin: Admin, sessions: Sessions
) -> None:
    await _tenant(admin, "acme")
    boss = await _member(admin, Role.TENANT_ADMIN, "acme")
    user = await _member(admin, Role.TENANT_USER, "acme")
    users = admin.cases.users
    key = await users.create_api_key(boss, user.user_id)
    assert key.id.startswith("ck_") and key.token.startswith(f"{key.id}.")
    assert [k.id for k in await users.list_api_keys(boss, user.user_id)] == [key.id]
    revoked = await users.revoke_api_key(boss, user.user_id, key.id)
    assert revoked.id == key.id and revoked.revoked_at is not None
    assert admin.forgotten == [user.user_id]
    async with sessions() as session:
        assert await tenants.authenticate(session, token=key.token) is None
    again = await users.revoke_api_key(boss, user.user_id, key.id)  # idempotent
    assert again.revoked_at == revoked.revoked_at
    for unknown in ("ck_ffffffffffffffff", key.id.removeprefix("ck_")):
        with pytest.raises(NotFound, match=f"API key '{unknown}' does not exist"):
            await users.revoke_api_key(boss, user.user_id, unknown)
    assert admin.forgotten == [user.user_id] * 2
    assert (await _actions(sessions))[-3:] == [
        "api_key.created",
        "api_key.revoked",
        "api_key.revoked",
    ]


async def test_who_may_manage_which_users(admin: Admin) -> None:
    await _tenant(admin, "acme")
    await _tenant(admin, "umbrella")
    operator = await _member(admin, Role.OPERATOR, None)
    other_operator = await _member(admin, Role.OPERATOR, None)
    boss = await _member(admin, Role.TENANT_ADMIN, "acme")
    user = await _member(admin, Role.TENANT_USER, "acme")
    stranger = await _member(admin, Role.TENANT_ADMIN, "umbrella")
    users = admin.cases.users
    for caller, target in ((stranger, user), (boss, operator), (user, "u-nobody")):
        target_id = target if isinstance(target, str) else target.user_id
        with pytest.raises(NotFound, match=f"user '{target_id}' does not exist"):
            await users.list_api_keys(caller, target_id)
        with pytest.raises(NotFound):
            await users.create_api_key(caller, target_id)
    for caller, target in ((user, boss), (operator, other_operator), (operator, ADMIN)):
        with pytest.raises(Forbidden):
            await users.list_api_keys(caller, target.user_id)
        with pytest.raises(Forbidden):
            await users.disable_user(caller, target.user_id)
    with pytest.raises(Forbidden):
        await users.create_api_key(user, boss.user_id)
    assert (await users.create_api_key(user, user.user_id)).user == user.user_id  # its own
    assert await users.list_api_keys(operator, operator.user_id) == []
    assert (await users.list_api_keys(operator, user.user_id))[0].user == user.user_id
    assert admin.forgotten == []


async def test_a_disabled_user_gets_no_key_and_the_last_admin_stays(
    admin: Admin, sessions: Sessions
) -> None:
    await _tenant(admin, "acme")
    user = await _member(admin, Role.TENANT_USER, "acme")
    disabled = await admin.cases.users.disable_user(ADMIN, user.user_id)
    assert disabled.disabled_at is not None
    assert admin.forgotten == [user.user_id]
    with pytest.raises(Conflict, match="is disabled"):
        await admin.cases.users.create_api_key(ADMIN, user.user_id)
    with pytest.raises(Conflict, match="last active admin"):
        await admin.cases.users.disable_user(ADMIN, ADMIN.user_id)
    assert admin.forgotten == [user.user_id]
    assert (await _actions(sessions))[-1] == "user.disabled"


async def test_usage_is_scoped_to_the_callers_tenant_over_a_period(admin: Admin) -> None:
    await _tenant(admin, "acme")
    await _tenant(admin, "umbrella")
    user = await _member(admin, Role.TENANT_USER, "acme")
    reports = admin.cases.usage
    end = datetime(2030, 1, 1, 12)
    page = await reports.records(user, start=None, end=end, tenant=None, limit=10, cursor=None)
    assert (page.tenant, page.items, page.next_cursor, page.totals.records) == ("acme", [], None, 0)
    assert (page.start, page.end) == (
        end.replace(tzinfo=UTC) - DEFAULT_PERIOD,
        end.replace(tzinfo=UTC),
    )
    everyone = await reports.report(ADMIN, start=None, end=None, tenant=None)
    assert (everyone.rows, everyone.tenants) == ([], {})
    assert (
        await reports.records(ADMIN, start=None, end=None, tenant="umbrella", limit=1, cursor=None)
    ).tenant == "umbrella"
    for caller, tenant in ((user, "umbrella"), (ADMIN, "nobody")):
        with pytest.raises(NotFound, match=f"tenant '{tenant}' does not exist"):
            await reports.report(caller, start=None, end=None, tenant=tenant)
    with pytest.raises(Invalid) as empty:
        await reports.report(user, start=end, end=end - timedelta(seconds=1), tenant=None)
    with pytest.raises(Invalid) as bad_cursor:
        await reports.records(user, start=None, end=None, tenant=None, limit=10, cursor="nope")
    assert (empty.value.field, bad_cursor.value.field) == ("from", "cursor")


async def test_the_audit_log_is_the_tenant_admins_own_and_no_tenant_users(admin: Admin) -> None:
    await _tenant(admin, "acme")
    await _tenant(admin, "umbrella")
    boss = await _member(admin, Role.TENANT_ADMIN, "acme")
    user = await _member(admin, Role.TENANT_USER, "acme")
    log = admin.cases.audit
    with pytest.raises(Forbidden):
        await log.page(user, object_type=None, limit=10, cursor=None)
    own = await log.page(boss, object_type=None, limit=100, cursor=None)
    assert {e.tenant for e in own.items} == {"acme"}
    everything = await log.page(ADMIN, object_type="tenant", limit=1, cursor=None)
    assert [e.object_id for e in everything.items] == ["umbrella"]
    assert everything.next_cursor is not None
    rest = await log.page(ADMIN, object_type="tenant", limit=1, cursor=everything.next_cursor)
    assert ([e.object_id for e in rest.items], rest.next_cursor) == (["acme"], None)
    with pytest.raises(Invalid) as bad_cursor:
        await log.page(boss, object_type=None, limit=10, cursor="nope")
    assert bad_cursor.value.field == "cursor"
