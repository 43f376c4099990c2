"""A tenant's fair share (its weight in the admission order, its cohort and quotas there):
anyone reads the share of a tenant it may act for; staff put and delete it
(`cnbrain.regional.use_cases.fair_shares` says what each refuses)."""

from fastapi import APIRouter, Response

from cnbrain.regional.deps import AdminUseCasesDep, PrincipalDep, StaffDep
from cnbrain.regional.problems import responses
from cnbrain.regional.use_cases.fair_shares import FairShareBody, FairShareView

router = APIRouter(prefix="/v1", tags=["tenants"])

ERRORS = responses(
    {
        401: "No valid API key.",
        403: "Only operators and admins put and delete fair shares.",
        404: "No such tenant (for this caller); deleting: no fair share stored.",
        422: "Malformed; `errors` names the field and its bounds.",
    }
)


@router.get(
    "/tenants/{tenant_id}/fair-share",
    response_model=FairShareView,
    responses=ERRORS,
    summary="A tenant's fair share (the defaults when none is stored)",
)
async def get_share(
    tenant_id: str, principal: PrincipalDep, cases: AdminUseCasesDep
) -> FairShareView:
    """A tenant's fair share: its weight in the admission order, its cohort, and the nominal
    quota and borrowing limit it has there; the defaults when none is stored."""
    return await cases.fair_shares.get_share(principal, tenant_id)


@router.put(
    "/tenants/{tenant_id}/fair-share",
    response_model=FairShareView,
    responses={
        **ERRORS,
        201: {"model": FairShareView, "description": "None was stored before."},
    },
    summary="Set a tenant's fair share: weight, cohort, nominal quota and borrowing limit",
)
async def put_share(
    tenant_id: str,
    body: FairShareBody,
    response: Response,
    principal: StaffDep,
    cases: AdminUseCasesDep,
) -> FairShareView:
    """Staff only. Sets the tenant's fair share; 201 when none was stored, 200 when replaced.
    The admission queue orders tenants by their use over their weight."""
    view, created = await cases.fair_shares.put_share(principal, tenant_id, body)
    if created:
        response.status_code = 201
    return view


@router.delete(
    "/tenants/{tenant_id}/fair-share",
    status_code=204,
    responses=ERRORS,
    summary="Delete a tenant's fair share: it has the defaults again",
)
async def delete_share(tenant_id: str, principal: StaffDep, cases: AdminUseCasesDep) -> None:
    """Staff only. Deletes the stored share; the tenant has the defaults again. 404 when none is
    stored."""
    await cases.fair_shares.delete_share(principal, tenant_id)
