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
    return await cases.tenants.create_tenant(principal, body)


@router.get("/tenants", response_model=list[TenantView], responses=ERRORS, summary="List tenants")
async def list_tenants(principal: StaffDep, cases: AdminUseCasesDep) -> list[TenantView]:
    return await cases.tenants.list_tenants(principal)


@router.get(
    "/tenants/{tenant_id}", response_model=TenantView, responses=ERRORS, summary="Get a tenant"
)
async def get_tenant(
    tenant_id: str, principal: PrincipalDep, cases: AdminUseCasesDep
) -> TenantView:
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
    return await cases.tenants.get_national_quota(principal, tenant_id)


@router.get(
    "/tenants/{tenant_id}/quota",
    response_model=QuotaView,
    responses=ERRORS,
    summary="A tenant's quota and use",
)
async def get_quota(tenant_id: str, principal: PrincipalDep, cases: AdminUseCasesDep) -> QuotaView:
    return await cases.tenants.get_quota(principal, tenant_id)


@router.post(
    "/users", response_model=UserView, status_code=201, responses=ERRORS, summary="Create a user"
)
async def create_user(
    body: UserCreate, principal: PrincipalDep, cases: AdminUseCasesDep
) -> UserView:
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
    return await cases.users.revoke_api_key(principal, user_id, key_id)


@router.post(
    "/users/{user_id}/disable",
    response_model=UserView,
    responses=ERRORS,
    summary="Disable a user: none of its keys works any more",
)
async def disable_user(user_id: str, principal: PrincipalDep, cases: AdminUseCasesDep) -> UserView:
    return await cases.users.disable_user(principal, user_id)
