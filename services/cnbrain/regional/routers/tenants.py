"""Tenants, their users and API keys, and quotas.

Who may manage a user (list and revoke its keys, disable it): admins any user; operators the
users of tenants, and themselves; a tenant's admins the users of their tenant. Users of other
tenants (and staff, for tenant roles) answer 404, as if they did not exist; tenant users may
manage nobody (403).
"""

from fastapi import APIRouter
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.netmap.arrays import cores_to_millicores, gbps_to_mbps, gib_to_mib
from cnbrain.regional.deps import BrainDep, PrincipalDep, StaffDep, forget_verified
from cnbrain.regional.problems import conflict, forbidden, invalid, not_found, responses
from cnbrain.regional.schemas import (
    ApiKeyInfo,
    ApiKeyView,
    QuotaBody,
    QuotaView,
    TenantCreate,
    TenantView,
    UserCreate,
    UserView,
)
from cnbrain.regional.security import STAFF_ROLES, TENANT_ROLES, Principal, Role
from cnbrain.storage import audit, tenants
from cnbrain.storage.tenants import ApiKey, User

router = APIRouter(prefix="/v1", tags=["tenants"])

ERRORS = responses(
    {
        401: "No valid API key.",
        403: "The caller's role may not do this.",
        404: "No such tenant or user (for this caller).",
        409: "It exists already, or (disabling) the user is the last active admin.",
        422: "Malformed; `errors` names the fields.",
    }
)


def _visible_tenant(principal: Principal, tenant_id: str) -> None:
    if not principal.may_act_for(tenant_id):
        raise not_found("tenant", tenant_id)


@router.post(
    "/tenants",
    response_model=TenantView,
    status_code=201,
    responses=ERRORS,
    summary="Create a tenant",
)
async def create_tenant(body: TenantCreate, brain: BrainDep, principal: StaffDep) -> TenantView:
    async with brain.sessions.begin() as session:
        if await tenants.get_tenant(session, tenant_id=body.id) is not None:
            raise conflict(f"tenant {body.id!r} exists already")
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


@router.get("/tenants", response_model=list[TenantView], responses=ERRORS, summary="List tenants")
async def list_tenants(brain: BrainDep, _: StaffDep) -> list[TenantView]:
    async with brain.sessions() as session:
        found = await tenants.list_tenants(session)
    return [TenantView(id=t.id, name=t.name, created_at=t.created_at) for t in found]


@router.get(
    "/tenants/{tenant_id}", response_model=TenantView, responses=ERRORS, summary="Get a tenant"
)
async def get_tenant(tenant_id: str, brain: BrainDep, principal: PrincipalDep) -> TenantView:
    _visible_tenant(principal, tenant_id)
    async with brain.sessions() as session:
        tenant = await tenants.get_tenant(session, tenant_id=tenant_id)
    if tenant is None:
        raise not_found("tenant", tenant_id)
    return TenantView(id=tenant.id, name=tenant.name, created_at=tenant.created_at)


@router.put(
    "/tenants/{tenant_id}/quota",
    response_model=QuotaView,
    responses=ERRORS,
    summary="Set a tenant's quota",
)
async def set_quota(
    tenant_id: str, body: QuotaBody, brain: BrainDep, principal: StaffDep
) -> QuotaView:
    async with brain.sessions.begin() as session:
        if await tenants.get_tenant(session, tenant_id=tenant_id) is None:
            raise not_found("tenant", tenant_id)
        await tenants.set_quota(
            session,
            tenant_id=tenant_id,
            limit_cpu_m=None if body.cpu_cores is None else cores_to_millicores(body.cpu_cores),
            limit_mem_mib=None if body.memory_gib is None else gib_to_mib(body.memory_gib),
            limit_accelerators=body.accelerators,
            limit_mbps=None if body.bandwidth_gbps is None else gbps_to_mbps(body.bandwidth_gbps),
            limit_active_requests=body.active_requests,
        )
        await audit.record(
            session,
            actor=principal.user_id,
            tenant_id=tenant_id,
            action="quota.set",
            object_type="tenant",
            object_id=tenant_id,
            detail=body.model_dump(),
        )
    return await get_quota(tenant_id, brain, principal)


@router.get(
    "/tenants/{tenant_id}/quota",
    response_model=QuotaView,
    responses=ERRORS,
    summary="A tenant's quota and use",
)
async def get_quota(tenant_id: str, brain: BrainDep, principal: PrincipalDep) -> QuotaView:
    _visible_tenant(principal, tenant_id)
    async with brain.sessions() as session:
        quota = await tenants.get_quota(session, tenant_id=tenant_id)
    if quota is None:
        raise not_found("tenant", tenant_id)
    return QuotaView(
        cpu_cores=None if quota.limit_cpu_m is None else quota.limit_cpu_m / 1000,
        memory_gib=None if quota.limit_mem_mib is None else quota.limit_mem_mib / 1024,
        accelerators=quota.limit_accelerators,
        bandwidth_gbps=None if quota.limit_mbps is None else quota.limit_mbps / 1000,
        active_requests=quota.limit_active_requests,
        used_cpu_cores=quota.used_cpu_m / 1000,
        used_memory_gib=quota.used_mem_mib / 1024,
        used_accelerators=quota.used_accelerators,
        used_bandwidth_gbps=quota.used_mbps / 1000,
        used_active_requests=quota.active_requests,
    )


@router.post(
    "/users", response_model=UserView, status_code=201, responses=ERRORS, summary="Create a user"
)
async def create_user(body: UserCreate, brain: BrainDep, principal: PrincipalDep) -> UserView:
    if body.role in STAFF_ROLES:
        if body.tenant is not None:
            raise invalid("tenant", "operators and admins belong to no tenant")
        if principal.role is not Role.ADMIN:
            raise forbidden("only admins create operators and admins")
    else:
        if body.tenant is None:
            raise invalid("tenant", "tenant roles need a tenant")
        if principal.role is Role.TENANT_USER or not principal.may_act_for(body.tenant):
            raise forbidden("only staff and the tenant's admins create its users")
    async with brain.sessions.begin() as session:
        if (
            body.tenant is not None
            and await tenants.get_tenant(session, tenant_id=body.tenant) is None
        ):
            raise not_found("tenant", body.tenant)
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


@router.post(
    "/users/{user_id}/api-keys",
    response_model=ApiKeyView,
    status_code=201,
    responses=ERRORS,
    summary="Create an API key for a user",
)
async def create_api_key(user_id: str, brain: BrainDep, principal: PrincipalDep) -> ApiKeyView:
    async with brain.sessions.begin() as session:
        user = await tenants.get_user(session, user_id=user_id)
        if user is None or not (principal.is_staff or principal.tenant_id == user.tenant_id):
            raise not_found("user", user_id)
        role = Role(user.role)
        allowed = (
            principal.role is Role.ADMIN
            or (principal.role is Role.OPERATOR and role in TENANT_ROLES)
            or (principal.role is Role.TENANT_ADMIN and role in TENANT_ROLES)
            or principal.user_id == user.id
        )
        if not allowed:
            raise forbidden("your role may not create keys for this user")
        if user.disabled_at is not None:
            raise conflict(f"user {user.id!r} is disabled")
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


@router.get(
    "/users/{user_id}/api-keys",
    response_model=list[ApiKeyInfo],
    responses=ERRORS,
    summary="List a user's API keys (revoked ones included, never their secrets)",
)
async def list_api_keys(user_id: str, brain: BrainDep, principal: PrincipalDep) -> list[ApiKeyInfo]:
    async with brain.sessions() as session:
        user = await _managed_user(session, principal, user_id)
        keys = await tenants.list_api_keys(session, user_id=user.id)
    return [_key_info(key) for key in keys]


@router.delete(
    "/users/{user_id}/api-keys/{key_id}",
    response_model=ApiKeyInfo,
    responses=ERRORS,
    summary="Revoke a user's API key (at once on this brain, within 10 s on its replicas)",
)
async def revoke_api_key(
    user_id: str, key_id: str, brain: BrainDep, principal: PrincipalDep
) -> ApiKeyInfo:
    stored_id = key_id.removeprefix(tenants.TOKEN_PREFIX)
    async with brain.sessions.begin() as session:
        user = await _managed_user(session, principal, user_id)
        if stored_id == key_id:  # the API names keys as the token does: ck_<id>
            raise not_found("API key", key_id)
        key = await tenants.revoke_api_key(session, key_id=stored_id, user_id=user.id)
        await audit.record(
            session,
            actor=principal.user_id,
            tenant_id=user.tenant_id,
            action="api_key.revoked",
            object_type="api_key",
            object_id=key_id,
            detail={"user": user.id},
        )
    forget_verified(brain, user.id)
    return _key_info(key)


@router.post(
    "/users/{user_id}/disable",
    response_model=UserView,
    responses=ERRORS,
    summary="Disable a user: none of its keys works any more",
)
async def disable_user(user_id: str, brain: BrainDep, principal: PrincipalDep) -> UserView:
    async with brain.sessions.begin() as session:
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
    forget_verified(brain, user.id)
    return _user_view(user)


async def _managed_user(session: AsyncSession, principal: Principal, user_id: str) -> User:
    """The user `principal` may manage (see the module docstring); ApiError 404 when it is
    not visible to the caller, 403 when visible but not the caller's to manage."""
    user = await tenants.get_user(session, user_id=user_id)
    if user is None or not (principal.is_staff or principal.tenant_id == user.tenant_id):
        raise not_found("user", user_id)
    role = Role(user.role)
    allowed = (
        principal.role is Role.ADMIN
        or (
            principal.role is Role.OPERATOR
            and (role in TENANT_ROLES or principal.user_id == user.id)
        )
        or (principal.role is Role.TENANT_ADMIN and role in TENANT_ROLES)
    )
    if not allowed:
        raise forbidden("your role may not manage this user's keys or disable it")
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
