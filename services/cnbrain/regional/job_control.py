"""A tenant pausing and resuming its running job (suspend and resume on the scheduler).

Suspending asks the scheduler of the request's site to stop the job's processes; they keep
their CPUs, memory and accelerators, and the request its reservation. Resuming lets them run
on. The API answers once the scheduler has done it (Slurm: within a few seconds); the request
moves between `running` and `suspended` only then.
"""

from dataclasses import dataclass

from cnbrain.domain.errors import Conflict, NotFound, Unavailable
from cnbrain.domain.states import LIVE_ATTEMPT, RequestState
from cnbrain.execution import BackendRejected, BackendUnavailable, UnknownJob
from cnbrain.regional.dispatcher import Dispatcher, describe, update_of
from cnbrain.regional.security import Principal
from cnbrain.storage import jobs, registry, requests
from cnbrain.storage.jobs import Job


@dataclass(frozen=True, slots=True)
class _Action:
    verb: str
    past: str
    from_state: str
    to_state: str


SUSPEND = _Action(
    verb="suspend",
    past="suspended",
    from_state=RequestState.RUNNING,
    to_state=RequestState.SUSPENDED,
)
RESUME = _Action(
    verb="resume", past="resumed", from_state=RequestState.SUSPENDED, to_state=RequestState.RUNNING
)


async def suspend(dispatcher: Dispatcher, principal: Principal, request_id: str) -> None:
    """Pause the running job of the caller's request.

    NotFound (no such request for the caller), Conflict (not running, or the scheduler
    refused), Unavailable (the scheduler cannot be reached; nothing changed)."""
    await _act(dispatcher, principal, request_id, SUSPEND)


async def resume(dispatcher: Dispatcher, principal: Principal, request_id: str) -> None:
    """Let the suspended job of the caller's request run on; errors as `suspend`."""
    await _act(dispatcher, principal, request_id, RESUME)


async def _act(
    dispatcher: Dispatcher, principal: Principal, request_id: str, action: _Action
) -> None:
    job = await _live_job(dispatcher, principal, request_id, action)
    assert job.backend_job_id is not None
    try:
        ref, backend = await dispatcher.backend_of(job.site_id)
    except registry.UnknownItem as exc:
        raise Conflict(f"request {request_id!r}: {exc}") from None
    where = f"the {describe(ref)} of site {job.site_id}"
    try:
        if action is SUSPEND:
            await backend.suspend(job.backend_job_id)
        else:
            await backend.resume(job.backend_job_id)
        status = dispatcher.real_time.status(ref, backend, await backend.status(job.backend_job_id))
    except BackendUnavailable as exc:
        raise Unavailable(f"{where} is unavailable: {exc}") from None
    except BackendRejected as exc:
        raise Conflict(
            f"{where} would not {action.verb} job {job.backend_job_id}: {exc.message}"
        ) from None
    except UnknownJob as exc:
        raise Conflict(f"{where} does not know job {job.backend_job_id}: {exc}") from None
    update = update_of(status)
    if update.state in LIVE_ATTEMPT:  # the scheduler did it: record that, whatever word it uses
        update = jobs.StatusUpdate(
            state=action.to_state,
            backend_state=update.backend_state,
            message=update.message,
            started_at=update.started_at,
        )
    await dispatcher.apply(job, update, actor=principal.user_id)


async def _live_job(
    dispatcher: Dispatcher, principal: Principal, request_id: str, action: _Action
) -> Job:
    async with dispatcher.sessions() as session:
        record = await requests.get_request(
            session, tenant_id=principal.tenant_scope(), request_id=request_id
        )
        if record is None:
            raise NotFound(f"request {request_id!r} does not exist")
        job = await jobs.live_attempt(session, request_id=request_id)
    if record.state != action.from_state or job is None or job.backend_job_id is None:
        raise _not_now(request_id, record.state, action)
    return job


def _not_now(request_id: str, state: str, action: _Action) -> Conflict:
    return Conflict(
        f"request {request_id!r} is {state}; only a {action.from_state} request's job can be "
        f"{action.past}"
    )
