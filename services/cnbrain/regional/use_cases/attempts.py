"""A request's job attempts, first to last, as its tenant sees them."""

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.errors import NotFound
from cnbrain.domain.states import AttemptState
from cnbrain.regional.schemas import AttemptList, AttemptView
from cnbrain.regional.security import Principal
from cnbrain.regional.stored_requests import stored_request
from cnbrain.storage import jobs, requests


class ListAttempts:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def __call__(self, principal: Principal, request_id: str) -> AttemptList:
        """Every attempt of the caller's request (staff: any tenant's); NotFound when the
        caller has no such request."""
        async with self._sessions() as session:
            record = await requests.get_request(
                session, tenant_id=principal.tenant_scope(), request_id=request_id
            )
            if record is None:
                raise NotFound(f"request {request_id!r} does not exist")
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
                    reason=a.reason,
                    exit_code=a.exit_code,
                    queued_at=a.queued_at,
                    submitted_at=a.submitted_at,
                    started_at=a.started_at,
                    ended_at=a.ended_at,
                )
                for a in attempts
            ],
        )
