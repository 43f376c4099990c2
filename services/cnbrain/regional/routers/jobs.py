"""The tenant API of a request's job: its attempts, suspend and resume.

A request with a `job` part is run on its site's cluster scheduler once placed (see
docs/execution.md). Tenant users and admins act on their tenant's requests, staff on every
tenant's; another tenant's request answers 404.
"""

from fastapi import APIRouter

from cnbrain.regional import job_control
from cnbrain.regional.deps import DispatcherDep, PrincipalDep, UseCasesDep
from cnbrain.regional.problems import Problem, responses
from cnbrain.regional.schemas import AttemptList, RequestView

router = APIRouter(prefix="/v1", tags=["requests"])

ERRORS = responses(
    {
        401: "No valid API key.",
        404: "No such request for this tenant.",
        409: "The request is not in the state this needs, or the scheduler refused.",
        503: "The site's scheduler cannot be reached now; nothing changed.",
    }
)


@router.get(
    "/requests/{request_id}/attempts",
    response_model=AttemptList,
    responses={404: ERRORS[404], 401: ERRORS[401]},
    summary="Every attempt to run the request's job, first to last",
)
async def list_attempts(
    request_id: str, principal: PrincipalDep, cases: UseCasesDep
) -> AttemptList:
    """Each attempt to run the job of a request of the caller's tenant (staff: any): its site,
    scheduler job id, state and times. Empty for a request without a `job`."""
    return await cases.attempts(principal, request_id)


@router.post(
    "/requests/{request_id}/suspend",
    response_model=RequestView,
    responses={**ERRORS, 409: {"model": Problem, "description": "The request is not running."}},
    summary="Pause the request's running job; it keeps its resources",
)
async def suspend(
    request_id: str, principal: PrincipalDep, cases: UseCasesDep, dispatcher: DispatcherDep
) -> RequestView:
    """Asks the site's scheduler to pause the job of a running request of the caller's tenant
    and answers the request, now `suspended`. The reservation holds meanwhile. 409 when the
    request is not running or the scheduler refuses; 503 when it cannot be reached."""
    await job_control.suspend(dispatcher, principal, request_id)
    return await cases.read.one(principal, request_id)


@router.post(
    "/requests/{request_id}/resume",
    response_model=RequestView,
    responses={**ERRORS, 409: {"model": Problem, "description": "The request is not suspended."}},
    summary="Let the request's suspended job run on",
)
async def resume(
    request_id: str, principal: PrincipalDep, cases: UseCasesDep, dispatcher: DispatcherDep
) -> RequestView:
    """Asks the site's scheduler to let the job of a suspended request of the caller's tenant
    run on and answers the request, `running` again. 409 when the request is not suspended or
    the scheduler refuses; 503 when it cannot be reached."""
    await job_control.resume(dispatcher, principal, request_id)
    return await cases.read.one(principal, request_id)
