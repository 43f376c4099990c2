"""Tenancy: tenants and their quotas (`ManageTenants`), users and their API keys
(`ManageUsers`). Every change is audited in the transaction that makes it.

Who may do what:
- Staff (operators and admins) create and list tenants and set quotas; anyone reads the
  tenants (and quotas) it may act for. A tenant the caller may not see is not found.
- Admins create any user, staff and tenant admins the users of tenants they may act for.
- Who may manage a user (list and revoke its keys, disable it): admins any user; operators
  the users of tenants, and themselves; a tenant's admins the users of their tenant. Users of
  other tenants (and staff, for tenant roles) are not found, as if they did not exist; tenant
  users may manage nobody (Forbidden). Creating a key follows the same rules, and anyone may
  create keys for itself.

In a federation (`federation` given) the tenancy is the national brain's: a change is
checked here as above, then recorded by the national brain (which refuses what its own
tables do not allow: a tenant or user that exists, an unknown tenant or user, a disabled
user, the last active admin), then followed here at once (`tenancy_sync.FollowTenancy`) and
audited here too; when the national brain cannot be reached the change is refused
(Unavailable) and nothing changes. A new key's secret stays on this brain: the national
brain gets its id and the SHA-256 of the secret. Reads are this brain's own tables.
"""

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.accelerators import MILLI
from cnbrain.domain.errors import Conflict, Forbidden, Invalid, NotFound
from cnbrain.domain.tenancy import (
    ApiKeyCreated,
    ApiKeyRevoked,
    QuotaLevel,
    QuotaSet,
    TenancyChange,
    TenantCreated,
    UserCreated,
    UserDisabled,
    subject_of,
)
from cnbrain.netmap.arrays import (
    cores_to_millicores,
    gbps_to_mbps,
    gib_to_mib,
    milli_to_accelerators,
)
from cnbrain.regional.schemas import (
    ApiKeyInfo,
    ApiKeyView,
    QuotaBody,
    QuotaUse,
    QuotaView,
    TenantCreate,
    TenantView,
    UserCreate,
    UserView,
)
from cnbrain.regional.security import STAFF_ROLES, TENANT_ROLES, Principal, Role
from cnbrain.regional.use_cases.tenancy_sync import FollowTenancy
from cnbrain.storage import audit, tenants
from cnbrain.storage.clock import utcnow
from cnbrain.storage.tenants import ApiKey, QuotaLimits, QuotaUsed, User

STAFF_ONLY = f"this needs one of the roles {', '.join(sorted(STAFF_ROLES))}"
"""Why a caller that is not staff may not manage tenants (the words the REST edge's role
check uses too)."""


class ManageTenants:
    """Tenants and their quotas; in a federation, the federation's (module docstring)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        federation: FollowTenancy | None = None,
    ) -> None:
        self._sessions = sessions
        self._federation = federation

    async def create_tenant(self, principal: Principal, body: TenantCreate) -> TenantView:
        """A new tenant with an unlimited quota. Raises Forbidden (not staff), Conflict (the
        id is taken) or Invalid (storage refuses the id or name)."""
        require_staff(principal)
        if self._federation is not None:
            change = TenantCreated(tenant_id=body.id, name=body.name)
            recorded = await _federated(self._sessions, self._federation, principal, change)
            return TenantView(id=body.id, name=body.name, created_at=_at(recorded))
        async with self._sessions.begin() as session:
            if await tenants.get_tenant(session, tenant_id=body.id) is not None:
                raise Conflict(f"tenant {body.id!r} exists already")
            tenant = await tenants.create_tenant(session, tenant_id=body.id, name=body.name)
            await audit.record(
                session,
                actor=principal.user_id,
                tenant_id=tenant.id,
                action="tenant.created",
                object_type="tenant",
                object_id=tenant.id,
            )
        return TenantView(id=tenant.id, name=tenant.name, created_at=tenant.created_at)

    async def list_tenants(self, principal: Principal) -> list[TenantView]:
        """Every tenant, by id. Raises Forbidden (not staff)."""
        require_staff(principal)
        async with self._sessions() as session:
            found = await tenants.list_tenants(session)
        return [TenantView(id=t.id, name=t.name, created_at=t.created_at) for t in found]

    async def get_tenant(self, principal: Principal, tenant_id: str) -> TenantView:
        """The tenant, if the caller may act for it; else NotFound."""
        require_visible(principal, tenant_id)
        async with self._sessions() as session:
            tenant = await tenants.get_tenant(session, tenant_id=tenant_id)
        if tenant is None:
            raise no_tenant(tenant_id)
        return TenantView(id=tenant.id, name=tenant.name, created_at=tenant.created_at)

    async def set_quota(
        self,
        principal: Principal,
        tenant_id: str,
        body: QuotaBody,
        *,
        region: str | None = None,
        national: bool = False,
    ) -> QuotaView:
        """Replace the tenant's limits (None: unlimited) and return its quota as it now
        stands on this brain. In a federation, the limits of every region, of `region`
        alone, or with `national` of its use summed over every region (`QuotaSet`). Raises
        Forbidden (not staff), NotFound (the tenant, or a region never registered), or
        Invalid (`region` or `national` on a standalone brain)."""
        require_staff(principal)
        limits = _limits(body)
        if self._federation is not None:
            level: QuotaLevel = "national" if national else "region"
            change = QuotaSet(tenant_id=tenant_id, level=level, region=region, **limits)
            detail = {**body.model_dump(), "level": level, "region": region}
            await _federated(self._sessions, self._federation, principal, change, detail=detail)
            return await self.get_quota(principal, tenant_id)
        if national:
            raise Invalid("a standalone brain has no national quota", field="national")
        if region is not None:
            raise Invalid("a standalone brain has no other regions", field="region")
        async with self._sessions.begin() as session:
            if await tenants.get_tenant(session, tenant_id=tenant_id) is None:
                raise no_tenant(tenant_id)
            await tenants.set_quota(session, tenant_id=tenant_id, **limits)
            await audit.record(
                session,
                actor=principal.user_id,
                tenant_id=tenant_id,
                action="quota.set",
                object_type="tenant",
                object_id=tenant_id,
                detail=body.model_dump(),
            )
        return await self.get_quota(principal, tenant_id)

    async def get_quota(self, principal: Principal, tenant_id: str) -> QuotaView:
        """The tenant's limits and use, as of now, if the caller may act for it; else
        NotFound."""
        require_visible(principal, tenant_id)
        async with self._sessions() as session:
            quota = await tenants.get_quota(session, tenant_id=tenant_id)
        if quota is None:
            raise no_tenant(tenant_id)
        national = _body(tenants.limits_of(quota, national=True))
        return QuotaView(
            **_body(tenants.limits_of(quota, national=False)).model_dump(),
            **_used(tenants.used_of(quota)),
            region=None if self._federation is None else self._federation.region,
            national=None if national == QuotaBody() else national,
        )

    async def get_national_quota(self, principal: Principal, tenant_id: str) -> QuotaUse:
        """The tenant's national limits (this brain's copy) and what its reservations use of
        them (the national brain's answer), if the caller may act for it. Raises NotFound
        (the tenant, or a standalone brain: no national quota), or PeerUnavailable when the
        national brain cannot be reached."""
        require_visible(principal, tenant_id)
        if self._federation is None:
            raise NotFound("a standalone brain has no national quota")
        async with self._sessions() as session:
            quota = await tenants.get_quota(session, tenant_id=tenant_id)
        if quota is None:
            raise no_tenant(tenant_id)
        use = await self._federation.national_quota_use(tenant_id)
        limits = _body(tenants.limits_of(quota, national=True))
        return QuotaUse(**limits.model_dump(), **_used(use))


def _limits(body: QuotaBody) -> dict[str, Any]:
    """`body`'s limits in the engine's units, by quota column."""
    return {
        "limit_cpu_m": None if body.cpu_cores is None else cores_to_millicores(body.cpu_cores),
        "limit_mem_mib": None if body.memory_gib is None else gib_to_mib(body.memory_gib),
        "limit_accelerators": body.accelerators,
        "limit_mbps": None if body.bandwidth_gbps is None else gbps_to_mbps(body.bandwidth_gbps),
        "limit_active_requests": body.active_requests,
    }


def _body(limits: QuotaLimits) -> QuotaBody:
    """`limits`, in the engine's units, in the API's."""
    return QuotaBody(
        cpu_cores=None if limits.cpu_m is None else limits.cpu_m / 1000,
        memory_gib=None if limits.mem_mib is None else limits.mem_mib / 1024,
        accelerators=None if limits.acc_milli is None else limits.acc_milli // MILLI,
        bandwidth_gbps=None if limits.mbps is None else limits.mbps / 1000,
        active_requests=limits.active_requests,
    )


def _used(used: QuotaUsed) -> dict[str, Any]:
    """`used`, in the engine's units, as the `used_` fields of `QuotaUse`."""
    return {
        "used_cpu_cores": used.cpu_m / 1000,
        "used_memory_gib": used.mem_mib / 1024,
        "used_accelerators": milli_to_accelerators(used.acc_milli),
        "used_bandwidth_gbps": used.mbps / 1000,
        "used_active_requests": used.active_requests,
    }


class ManageUsers:
    """Users and their API keys. `forget_keys(user_id)` drops the cached verifications of the
    user's keys; it is called once a revocation or a disabling has committed."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        forget_keys: Callable[[str], None],
        federation: FollowTenancy | None = None,
    ) -> None:
        self._sessions = sessions
        self._forget_keys = forget_keys
        self._federation = federation

    async def create_user(self, principal: Principal, body: UserCreate) -> UserView:
        """A new user. Raises Invalid (field `tenant`: a staff role with a tenant, a tenant
        role without one), Forbidden (see the module docstring) or NotFound (no such
        tenant)."""
        if body.role in STAFF_ROLES:
            if body.tenant is not None:
                raise Invalid("operators and admins belong to no tenant", field="tenant")
            if principal.role is not Role.ADMIN:
                raise Forbidden("only admins create operators and admins")
        else:
            if body.tenant is None:
                raise Invalid("tenant roles need a tenant", field="tenant")
            if principal.role is Role.TENANT_USER or not principal.may_act_for(body.tenant):
                raise Forbidden("only staff and the tenant's admins create its users")
        if self._federation is not None:
            change = UserCreated(
                user_id=tenants.new_user_id(),
                tenant_id=body.tenant,
                name=body.name,
                role=body.role.value,
            )
            await _federated(
                self._sessions, self._federation, principal, change, detail={"role": body.role}
            )
            return UserView(id=change.user_id, name=body.name, role=body.role, tenant=body.tenant)
        async with self._sessions.begin() as session:
            if (
                body.tenant is not None
                and await tenants.get_tenant(session, tenant_id=body.tenant) is None
            ):
                raise no_tenant(body.tenant)
            user = await tenants.create_user(
                session, name=body.name, role=body.role, tenant_id=body.tenant
            )
            await audit.record(
                session,
                actor=principal.user_id,
                tenant_id=body.tenant,
                action="user.created",
                object_type="user",
                object_id=user.id,
                detail={"role": body.role},
            )
        return _user_view(user)

    async def create_api_key(self, principal: Principal, user_id: str) -> ApiKeyView:
        """A new key of the user, with its token (the only time it is visible). Raises
        NotFound, Forbidden (see the module docstring) or Conflict (the user is disabled)."""
        if self._federation is not None:
            async with self._sessions() as session:
                user = await self._key_owner(session, principal, user_id)
            key_id, token, digest = tenants.new_api_key()
            change = ApiKeyCreated(key_id=key_id, user_id=user.id, secret_sha256=digest)
            await _federated(
                self._sessions,
                self._federation,
                principal,
                change,
                tenant_id=user.tenant_id,
                detail={"user": user.id},
            )
            return ApiKeyView(id=f"{tenants.TOKEN_PREFIX}{key_id}", user=user.id, token=token)
        async with self._sessions.begin() as session:
            user = await self._key_owner(session, principal, user_id)
            token = await tenants.create_api_key(session, user_id=user.id)
            key_id = token.split(".", 1)[0]
            await audit.record(
                session,
                actor=principal.user_id,
                tenant_id=user.tenant_id,
                action="api_key.created",
                object_type="api_key",
                object_id=key_id,
                detail={"user": user.id},
            )
        return ApiKeyView(id=key_id, user=user.id, token=token)

    async def _key_owner(self, session: AsyncSession, principal: Principal, user_id: str) -> User:
        """The user the caller may create a key for (see the module docstring)."""
        user = await _visible_user(session, principal, user_id)
        if not (_may_manage(principal, user) or principal.user_id == user.id):
            raise Forbidden("your role may not create keys for this user")
        if user.disabled_at is not None:
            raise Conflict(f"user {user.id!r} is disabled")
        return user

    async def list_api_keys(self, principal: Principal, user_id: str) -> list[ApiKeyInfo]:
        """The user's keys, revoked ones included, oldest first. Raises NotFound or
        Forbidden (see the module docstring)."""
        async with self._sessions() as session:
            user = await _managed_user(session, principal, user_id)
            keys = await tenants.list_api_keys(session, user_id=user.id)
        return [_key_info(key) for key in keys]

    async def revoke_api_key(self, principal: Principal, user_id: str, key_id: str) -> ApiKeyInfo:
        """Revoke the user's key, named as its token begins (`ck_<id>`), and return it; it
        stops working at once on this replica. Idempotent. Raises NotFound (no such user or
        key of the user) or Forbidden (see the module docstring)."""
        stored_id = key_id.removeprefix(tenants.TOKEN_PREFIX)
        if self._federation is not None:
            return await self._revoke_federated(self._federation, principal, user_id, key_id)
        async with self._sessions.begin() as session:
            user = await _managed_user(session, principal, user_id)
            if stored_id == key_id:
                raise _no_key(key_id)
            try:
                key = await tenants.revoke_api_key(session, key_id=stored_id, user_id=user.id)
            except tenants.NotFoundError:
                raise _no_key(key_id) from None
            await audit.record(
                session,
                actor=principal.user_id,
                tenant_id=user.tenant_id,
                action="api_key.revoked",
                object_type="api_key",
                object_id=key_id,
                detail={"user": user.id},
            )
        self._forget_keys(user.id)
        return _key_info(key)

    async def disable_user(self, principal: Principal, user_id: str) -> UserView:
        """Disable the user and return it: none of its keys works any more (at once on this
        replica). Idempotent. Raises NotFound, Forbidden (see the module docstring) or
        Conflict (the user is the last active admin)."""
        if self._federation is not None:
            async with self._sessions() as session:
                user = await _managed_user(session, principal, user_id)
            recorded = await _federated(
                self._sessions,
                self._federation,
                principal,
                UserDisabled(user_id=user.id),
                tenant_id=user.tenant_id,
            )
            self._forget_keys(user.id)
            return _user_view(replace(user, disabled_at=user.disabled_at or _at(recorded)))
        async with self._sessions.begin() as session:
            user = await _managed_user(session, principal, user_id)
            user = await tenants.disable_user(session, user_id=user.id)
            await audit.record(
                session,
                actor=principal.user_id,
                tenant_id=user.tenant_id,
                action="user.disabled",
                object_type="user",
                object_id=user.id,
            )
        self._forget_keys(user.id)
        return _user_view(user)

    async def _revoke_federated(
        self, federation: FollowTenancy, principal: Principal, user_id: str, key_id: str
    ) -> ApiKeyInfo:
        """`revoke_api_key` in a federation: of a key this brain has taken already."""
        stored_id = key_id.removeprefix(tenants.TOKEN_PREFIX)
        async with self._sessions() as session:
            user = await _managed_user(session, principal, user_id)
            keys = await tenants.list_api_keys(session, user_id=user.id)
        key = next((k for k in keys if k.id == stored_id), None)
        if stored_id == key_id or key is None:
            raise _no_key(key_id)
        try:
            change = ApiKeyRevoked(key_id=stored_id, user_id=user.id)
        except ValidationError:
            raise _no_key(key_id) from None
        try:
            recorded = await _federated(
                self._sessions,
                federation,
                principal,
                change,
                tenant_id=user.tenant_id,
                detail={"user": user.id},
            )
        except NotFound:
            raise _no_key(key_id) from None
        self._forget_keys(user.id)
        return _key_info(replace(key, revoked_at=key.revoked_at or _at(recorded)))


async def _federated(
    sessions: async_sessionmaker[AsyncSession],
    federation: FollowTenancy,
    principal: Principal,
    change: TenancyChange,
    *,
    tenant_id: str | None = None,
    detail: dict[str, Any] | None = None,
) -> TenancyChange:
    """Record `change` in the national brain and follow it here (see the module docstring),
    then audit it here (for `tenant_id`, when the change does not name its tenant); the
    change as recorded."""
    recorded = await federation.change(change, actor=principal.user_id)
    object_type, object_id, named = subject_of(recorded)
    tenant_id = named or tenant_id
    async with sessions.begin() as session:
        await audit.record(
            session,
            actor=principal.user_id,
            tenant_id=tenant_id,
            action=recorded.kind,
            object_type=object_type,
            object_id=object_id,
            detail=detail,
        )
    return recorded


def _at(change: TenancyChange) -> datetime:
    """When the national brain recorded `change` (it always says)."""
    return change.at or utcnow()


def require_staff(principal: Principal) -> None:
    """Forbidden unless `principal` is staff."""
    if not principal.is_staff:
        raise Forbidden(STAFF_ONLY)


def require_visible(principal: Principal, tenant_id: str) -> None:
    """NotFound (as if it did not exist) unless `principal` may act for the tenant."""
    if not principal.may_act_for(tenant_id):
        raise no_tenant(tenant_id)


def no_tenant(tenant_id: str) -> NotFound:
    """The error of a tenant that does not exist (or that the caller may not see)."""
    return NotFound(f"tenant {tenant_id!r} does not exist")


def _no_key(key_id: str) -> NotFound:
    return NotFound(f"API key {key_id!r} does not exist")


async def _visible_user(session: AsyncSession, principal: Principal, user_id: str) -> User:
    """The user, if it exists and is visible to the caller (staff see every user, tenant roles
    the users of their tenant); else NotFound."""
    user = await tenants.get_user(session, user_id=user_id)
    if user is None or not (principal.is_staff or principal.tenant_id == user.tenant_id):
        raise NotFound(f"user {user_id!r} does not exist")
    return user


def _may_manage(principal: Principal, user: User) -> bool:
    """Whether the caller may manage `user`, one visible to it (see the module docstring)."""
    role = Role(user.role)
    return (
        principal.role is Role.ADMIN
        or (
            principal.role is Role.OPERATOR
            and (role in TENANT_ROLES or principal.user_id == user.id)
        )
        or (principal.role is Role.TENANT_ADMIN and role in TENANT_ROLES)
    )


async def _managed_user(session: AsyncSession, principal: Principal, user_id: str) -> User:
    """The user the caller may manage; NotFound when it is not visible to the caller,
    Forbidden when visible but not the caller's to manage."""
    user = await _visible_user(session, principal, user_id)
    if not _may_manage(principal, user):
        raise Forbidden("your role may not manage this user's keys or disable it")
    return user


def _user_view(user: User) -> UserView:
    return UserView(
        id=user.id,
        name=user.name,
        role=Role(user.role),
        tenant=user.tenant_id,
        disabled_at=user.disabled_at,
    )


def _key_info(key: ApiKey) -> ApiKeyInfo:
    return ApiKeyInfo(
        id=f"{tenants.TOKEN_PREFIX}{key.id}",
        user=key.user_id,
        created_at=key.created_at,
        revoked_at=key.revoked_at,
    )
