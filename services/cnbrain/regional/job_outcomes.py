"""What an attempt's end does to its request, inside the caller's transaction, each with the
request's event (`cnbrain.domain.events`).

- `finish_request`: the request ends (completed or failed) and its reservations in this
  brain's ledger are released at once.
- `retry_on_same_site`: the next attempt is queued on the same site, keeping the reservation.
  Attempts ended by a preemption do not count toward `max_attempts` (`jobs.counted`); the
  reasons then say which of the counted attempts it is.
- `attempt_ended`: the event of an attempt that ended without completing.

A request placed across regions holds its reservation in parts kept by their owners; the
caller releases those through the national brain after committing (`release_elsewhere`).
"""

import logging

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.events import RequestEvent, RequestEventKind
from cnbrain.domain.states import RequestState, ReservationState
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.regional.use_cases.ports import NationalClient
from cnbrain.storage import audit, jobs, ledger_store, peer_ledger, request_events
from cnbrain.storage.clock import utcnow
from cnbrain.storage.jobs import Job

log = logging.getLogger("cnbrain.regional")

SYSTEM = "system"


_END_OF_STATE = {
    RequestState.COMPLETED: RequestEventKind.ENDED,
    RequestState.FAILED: RequestEventKind.FAILED,
}
"""The event of each state an attempt's end leaves its request in."""


async def finish_request(
    session: AsyncSession,
    *,
    request_id: str,
    tenant_id: str,
    state: str,
    reason: str | None,
    attempt: int | None = None,
) -> bool:
    """Move the request to `state` ("completed" or "failed") if it may go there, release
    every reservation it holds in this brain's ledger, and append its event (`ended` or
    `failed`, naming its last `attempt` when given); the delivery of a completed request's
    results keeps its flows until their windows end. True if it moved (then the caller tells
    its unit of work that it freed capacity, and releases any cross-region parts after
    committing)."""
    kind = _END_OF_STATE[RequestState(state)]
    before = await jobs.advance_request(session, request_id=request_id, state=state, reason=reason)
    if before is None:
        return False
    await request_events.append_many(
        session, [RequestEvent.of(request_id, kind, utcnow(), attempt=attempt, reason=reason)]
    )
    completed = state == RequestState.COMPLETED
    for reservation_id in await ledger_store.held_reservations(session, request_id=request_id):
        await ledger_store.release(session, reservation_id=reservation_id, keep_delivery=completed)
    await audit.record(
        session,
        actor=SYSTEM,
        tenant_id=tenant_id,
        action=f"request.{state}",
        object_type="request",
        object_id=request_id,
        detail={"reason": reason} if reason else {},
    )
    return True


async def retry_on_same_site(
    session: AsyncSession, *, last: Job, used: int, max_attempts: int
) -> None:
    """Queue the attempt after `last` on `last`'s site (the reservation stays), and say so
    in the request's reason and its `requeued` event; the request goes back to `submitted`.
    `used` is how many of its attempts count toward `max_attempts` so far."""
    attempt = last.attempt + 1
    reason = (
        f"attempt {last.attempt} {_ended(last)}; {_of(attempt, used + 1, max_attempts)} "
        f"queued on site {last.site_id}"
    )
    await jobs.queue_attempt(
        session,
        request_id=last.request_id,
        tenant_id=last.tenant_id,
        attempt=attempt,
        site_id=last.site_id,
        backend=last.backend,
        message=f"retry of attempt {last.attempt}",
    )
    await jobs.advance_request(
        session, request_id=last.request_id, state=RequestState.SUBMITTED, reason=reason
    )
    await request_events.append_many(
        session,
        [
            RequestEvent.of(
                last.request_id,
                RequestEventKind.REQUEUED,
                utcnow(),
                attempt=attempt,
                site=last.site_id,
                reason=reason,
            )
        ],
    )
    await audit.record(
        session,
        actor=SYSTEM,
        tenant_id=last.tenant_id,
        action="job.retried",
        object_type="request",
        object_id=last.request_id,
        detail={"attempt": attempt, "site": last.site_id, "after": _ended(last)},
    )


def attempt_ended(
    job: Job, *, state: str, message: str | None, exit_code: int | None = None
) -> RequestEvent:
    """The `attempt_ended` event of `job`'s request: the attempt ended in `state` (not
    completed), as its scheduler (or the brain) said in `message`."""
    return RequestEvent.of(
        job.request_id,
        RequestEventKind.ATTEMPT_ENDED,
        utcnow(),
        attempt=job.attempt,
        site=job.site_id,
        state=state,
        message=message,
        exit_code=exit_code,
    )


def _ended(job: Job) -> str:
    """How an attempt ended, for people: its state and the scheduler's message."""
    words = {
        "failed": "failed",
        "timeout": "ran out of time",
        "cancelled": "was cancelled by the scheduler",
        "lost": "was lost",
        "not_submitted": "was not submitted",
    }
    detail = f": {job.message}" if job.message else ""
    return f"{words.get(job.state, job.state)}{detail}"


def failure_reason(last: Job, used: int, max_attempts: int) -> str:
    """The reason of a request whose last attempt `last` ended it, `used` of its attempts
    counting toward `max_attempts`."""
    return f"{_of(last.attempt, used, max_attempts)} {_ended(last)}"


def _of(attempt: int, used: int, max_attempts: int) -> str:
    """Attempt number `attempt`, the `used`-th of `max_attempts` that count: "attempt 2 of
    3", or, after preempted attempts, "attempt 4 (2 of 3; preempted ones do not count)"."""
    if attempt == used:
        return f"attempt {attempt} of {max_attempts}"
    return f"attempt {attempt} ({used} of {max_attempts}; preempted ones do not count)"


async def held_parts(session: AsyncSession, *, request_id: str) -> list[str]:
    """The ids of the request's cross-region parts still held or prepared."""
    parts = await peer_ledger.parts_of_request(session, request_id=request_id)
    return [p.id for p in parts if p.state != ReservationState.RELEASED]


async def release_elsewhere(
    sessions: async_sessionmaker[AsyncSession],
    national: NationalClient | None,
    *,
    request_ids: list[str] | None = None,
) -> int:
    """Release, through `national` (the link to the national brain), the cross-region parts
    of this brain's requests that have ended (completed, failed or cancelled), or of
    `request_ids` (a completed job's delivery flows hold until their windows end); returns
    how many. Nothing happens on a standalone brain (`national` None).
    A national brain that cannot be reached leaves the rest for the next call (the dispatcher
    calls this every round)."""
    if national is None:
        return 0
    async with sessions() as session:
        part_ids = await peer_ledger.unreleased_parts_of_ended_requests(
            session, request_ids=request_ids
        )
    released = 0
    for part_id, completed in part_ids:
        try:
            await national.release(part_id, "the request's job ended", keep_delivery=completed)
        except PeerUnavailable as error:
            log.warning(
                "could not release cross-region part %s (%s); trying again later",
                part_id,
                error.cause.upper(),
            )
            break
        released += 1
    return released
