"""The tenant API of a request's job: its attempts, suspend and resume.

A request with a `job` part is run on its site's cluster scheduler once placed (see
docs/execution.md). Tenant users and admins act on their tenant's requests, staff on every
tenant's; another tenant's request answers 404.
"""

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from cnbrain.domain.states import AttemptState
from cnbrain.regional import job_control
from cnbrain.regional.deps import BrainDep, PrincipalDep, UseCasesDep
from cnbrain.regional.dispatcher import Dispatcher
from cnbrain.regional.problems import Problem, not_found, responses
from cnbrain.regional.schemas import AttemptList, AttemptView, RequestView
from cnbrain.regional.stored_requests import stored_request
from cnbrain.storage import jobs, requests

router = APIRouter(prefix="/v1", tags=["requests"])

ERRORS = responses(
    {
        401: "No valid API key.",
        404: "No such request for this tenant.",
        409: "The request is not in the state this needs, or the scheduler refused.",
        503: "The site's scheduler cannot be reached now; nothing changed.",
    }
)


def get_dispatcher(request: Request) -> Dispatcher:
    dispatcher: Dispatcher = request.app.state.dispatcher
    return dispatcher


DispatcherDep = Annotated[Dispatcher, Depends(get_dispatcher)]


@router.get(
    "/requests/{request_id}/attempts",
    response_model=AttemptList,
    responses={404: ERRORS[404], 401: ERRORS[401]},
    summary="Every attempt to run the request's job, first to last",
)
async def list_attempts(request_id: str, principal: PrincipalDep, brain: BrainDep) -> AttemptList:
    async with brain.sessions() as session:
        record = await requests.get_request(
            session, tenant_id=principal.tenant_scope(), request_id=request_id
        )
        if record is None:
            raise not_found("request", request_id)
        attempts = await jobs.attempts_of(session, request_id=request_id)
    stored, _ = stored_request(record.body)
    job = stored.job if stored is not None else None
    return AttemptList(
        request=record.id,
        state=record.state,
        max_attempts=job.max_attempts if job is not None else None,
        attempts=[
            AttemptView(
                attempt=a.attempt,
                site=a.site_id,
                backend=a.backend,
                backend_job_id=a.backend_job_id,
                state=AttemptState(a.state),
                backend_state=a.backend_state,
                message=a.message,
                exit_code=a.exit_code,
                queued_at=a.queued_at,
                submitted_at=a.submitted_at,
                started_at=a.started_at,
                ended_at=a.ended_at,
            )
            for a in attempts
        ],
    )


@router.post(
    "/requests/{request_id}/suspend",
    response_model=RequestView,
    responses={**ERRORS, 409: {"model": Problem, "description": "The request is not running."}},
    summary="Pause the request's running job; it keeps its resources",
)
async def suspend(
    request_id: str, principal: PrincipalDep, cases: UseCasesDep, dispatcher: DispatcherDep
) -> RequestView:
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
    await job_control.resume(dispatcher, principal, request_id)
    return await cases.read.one(principal, request_id)
