"""Tenants, their users and API keys, and quotas.

Who may do what is said (and enforced) by `cnbrain.regional.use_cases.tenancy`; the routes
that only staff may use also refuse other callers before reading the body.
"""

from typing import Annotated

from fastapi import APIRouter, Query

from cnbrain.domain.tenancy import ID_PATTERN
from cnbrain.regional.deps import AdminUseCasesDep, PrincipalDep, StaffDep
from cnbrain.regional.problems import responses
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


@router.post(
    "/tenants",
    response_model=TenantView,
    status_code=201,
    responses=ERRORS,
    summary="Create a tenant",
)
async def create_tenant(
    body: TenantCreate, principal: StaffDep, cases: AdminUseCasesDep
) -> TenantView:
    """Staff only. A new tenant with no quota limits; in a federation it is recorded by the
    national brain and known to every brain within `tenancy_interval_s`. 409 when the id is
    taken."""
    return await cases.tenants.create_tenant(principal, body)


@router.get("/tenants", response_model=list[TenantView], responses=ERRORS, summary="List tenants")
async def list_tenants(principal: StaffDep, cases: AdminUseCasesDep) -> list[TenantView]:
    """Staff only. Every tenant, by id."""
    return await cases.tenants.list_tenants(principal)


@router.get(
    "/tenants/{tenant_id}", response_model=TenantView, responses=ERRORS, summary="Get a tenant"
)
async def get_tenant(
    tenant_id: str, principal: PrincipalDep, cases: AdminUseCasesDep
) -> TenantView:
    """A tenant the caller may act for (staff: any; a tenant's users: their own); another tenant
    is 404."""
    return await cases.tenants.get_tenant(principal, tenant_id)


@router.put(
    "/tenants/{tenant_id}/quota",
    response_model=QuotaView,
    responses=ERRORS,
    summary="Set a tenant's quota",
)
async def set_quota(
    tenant_id: str,
    body: QuotaBody,
    principal: StaffDep,
    cases: AdminUseCasesDep,
    region: Annotated[
        str | None,
        Query(
            pattern=ID_PATTERN,
            description="In a federation, the one region whose limits these are; "
            "without it, every region's (replacing limits set for one region).",
        ),
    ] = None,
) -> QuotaView:
    """Staff only. Replaces the tenant's limits on this brain's ledger (a null limit is none)
    and answers the quota as it now stands. A submission that would exceed a limit is rejected
    with the limit named. In a federation, the limits of every region, or with `region` of that
    one."""
    return await cases.tenants.set_quota(principal, tenant_id, body, region=region)


@router.put(
    "/tenants/{tenant_id}/national-quota",
    response_model=QuotaView,
    responses=ERRORS,
    summary="Set a tenant's national quota: limits on its use summed over every region",
)
async def set_national_quota(
    tenant_id: str, body: QuotaBody, principal: StaffDep, cases: AdminUseCasesDep
) -> QuotaView:
    """Staff only, in a federation. Limits on the tenant's use summed over every region; a
    tenant with them is placed by the national brain, which holds it to them. A standalone brain
    answers 422."""
    return await cases.tenants.set_quota(principal, tenant_id, body, national=True)


@router.get(
    "/tenants/{tenant_id}/national-quota",
    response_model=QuotaUse,
    responses=ERRORS,
    summary="A tenant's national quota and its use summed over every region",
)
async def get_national_quota(
    tenant_id: str, principal: PrincipalDep, cases: AdminUseCasesDep
) -> QuotaUse:
    """In a federation, the tenant's national limits and what its reservations use of them over
    every region, as the national brain counts them. For a tenant the caller may act for; a
    standalone brain answers 404."""
    return await cases.tenants.get_national_quota(principal, tenant_id)


@router.get(
    "/tenants/{tenant_id}/quota",
    response_model=QuotaView,
    responses=ERRORS,
    summary="A tenant's quota and use",
)
async def get_quota(tenant_id: str, principal: PrincipalDep, cases: AdminUseCasesDep) -> QuotaView:
    """A tenant's limits on this brain's ledger and what its held reservations use of them now,
    for a tenant the caller may act for; in a federation with its national limits."""
    return await cases.tenants.get_quota(principal, tenant_id)


@router.post(
    "/users", response_model=UserView, status_code=201, responses=ERRORS, summary="Create a user"
)
async def create_user(
    body: UserCreate, principal: PrincipalDep, cases: AdminUseCasesDep
) -> UserView:
    """A new user of a role: admins create anyone; operators and tenant admins the users of
    tenants they may act for. Staff roles belong to no tenant, tenant roles to one (422 naming
    `tenant` otherwise)."""
    return await cases.users.create_user(principal, body)


@router.post(
    "/users/{user_id}/api-keys",
    response_model=ApiKeyView,
    status_code=201,
    responses=ERRORS,
    summary="Create an API key for a user",
)
async def create_api_key(
    user_id: str, principal: PrincipalDep, cases: AdminUseCasesDep
) -> ApiKeyView:
    """A new API key of the user; its `token` is shown in this answer only and is sent as
    `Authorization: Bearer <token>`. Anyone may create keys for itself; managing others' keys
    follows the rules of users."""
    return await cases.users.create_api_key(principal, user_id)


@router.get(
    "/users/{user_id}/api-keys",
    response_model=list[ApiKeyInfo],
    responses=ERRORS,
    summary="List a user's API keys (revoked ones included, never their secrets)",
)
async def list_api_keys(
    user_id: str, principal: PrincipalDep, cases: AdminUseCasesDep
) -> list[ApiKeyInfo]:
    """The user's keys, oldest first, revoked ones included, never their secrets. For users the
    caller may manage (admins: any; operators: tenants' users and themselves; tenant admins:
    their tenant's users)."""
    return await cases.users.list_api_keys(principal, user_id)


@router.delete(
    "/users/{user_id}/api-keys/{key_id}",
    response_model=ApiKeyInfo,
    responses=ERRORS,
    summary=(
        "Revoke a user's API key (at once on this brain, within 10 s on its replicas; "
        "in a federation within tenancy_interval_s on every brain)"
    ),
)
async def revoke_api_key(
    user_id: str, key_id: str, principal: PrincipalDep, cases: AdminUseCasesDep
) -> ApiKeyInfo:
    """Revokes the key (named by its id, the token's part before the dot) and answers it with
    `revoked_at` set; idempotent. For users the caller may manage."""
    return await cases.users.revoke_api_key(principal, user_id, key_id)


@router.post(
    "/users/{user_id}/disable",
    response_model=UserView,
    responses=ERRORS,
    summary="Disable a user: none of its keys works any more",
)
async def disable_user(user_id: str, principal: PrincipalDep, cases: AdminUseCasesDep) -> UserView:
    """Disables the user: none of its keys works any more; idempotent. For users the caller may
    manage; 409 for the last active admin."""
    return await cases.users.disable_user(principal, user_id)
