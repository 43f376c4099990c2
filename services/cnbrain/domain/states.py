"""The state vocabularies of requests, job attempts and reservations, with which state may
follow which. Each is defined here only; storage, services and the REST API use these.

Requests (`REQUEST_TRANSITIONS`):

    pending   -> placed | queued | rejected | failed
    queued    -> placed | rejected | failed | cancelled
    placed    -> submitted | running | queued | cancelled | failed
    submitted -> running | suspended | queued | completed | failed | cancelled
    running   -> suspended | submitted | queued | completed | failed | cancelled
    suspended -> running | submitted | queued | completed | failed | cancelled

`queued` waits in the region's admission queue for the earliest start at which it fits; it
holds nothing. A runnable request goes back to queued when it is preempted (its reservation
released in the same transaction).

submitted, running and suspended follow the request's job on its site's cluster scheduler;
going back to submitted is the job's next attempt. A request in `RUNNABLE` holds its
reservation: its job may run, and it may be cancelled.

Job attempts (`ATTEMPT_TRANSITIONS`): queued -> submitting -> pending (the scheduler has it),
not_submitted (the scheduler refused it) or lost (the brain submitting it stopped); a live
attempt (`LIVE_ATTEMPT`) moves between the live states as its scheduler reports them, until
it ends completed, failed, cancelled or timeout.

Reservations (`RESERVATION_TRANSITIONS`): a cross-brain part is prepared, then held
(committed) or released; a brain's own reservation is held, then released.
"""

from collections.abc import Mapping
from enum import StrEnum


class RequestState(StrEnum):
    """Where a tenant's placement request is."""

    PENDING = "pending"
    QUEUED = "queued"
    PLACED = "placed"
    SUBMITTED = "submitted"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"


_R = RequestState
_AFTER_JOB_START = frozenset({_R.COMPLETED, _R.FAILED, _R.CANCELLED})

REQUEST_TRANSITIONS: Mapping[RequestState, frozenset[RequestState]] = {
    _R.PENDING: frozenset({_R.PLACED, _R.QUEUED, _R.REJECTED, _R.FAILED}),
    _R.QUEUED: frozenset({_R.PLACED, _R.REJECTED, _R.FAILED, _R.CANCELLED}),
    _R.PLACED: frozenset({_R.SUBMITTED, _R.RUNNING, _R.QUEUED, _R.CANCELLED, _R.FAILED}),
    _R.SUBMITTED: frozenset({_R.RUNNING, _R.SUSPENDED, _R.QUEUED}) | _AFTER_JOB_START,
    _R.RUNNING: frozenset({_R.SUSPENDED, _R.SUBMITTED, _R.QUEUED}) | _AFTER_JOB_START,
    _R.SUSPENDED: frozenset({_R.RUNNING, _R.SUBMITTED, _R.QUEUED}) | _AFTER_JOB_START,
}
"""The states each state may go to; states not listed are final (`ENDED_REQUEST`)."""

RUNNABLE: frozenset[RequestState] = frozenset({_R.PLACED, _R.SUBMITTED, _R.RUNNING, _R.SUSPENDED})
"""Placed and its job not ended: the request holds its reservation, its job may run, it may
be cancelled."""

CANCELLABLE: frozenset[RequestState] = RUNNABLE | {_R.QUEUED}
"""A tenant may cancel a request in these states: runnable, or waiting in the queue."""

ENDED_REQUEST: frozenset[RequestState] = frozenset(RequestState) - frozenset(REQUEST_TRANSITIONS)
"""Final request states: no state follows them."""

RELEASED_AFTER_PLACED: frozenset[RequestState] = _AFTER_JOB_START
"""Final states of a request that was placed: what it held was given back."""

_REQUEST_STATES = frozenset(RequestState)


def request_may_go(current: str, target: str) -> bool:
    """Whether `REQUEST_TRANSITIONS` let a request in `current` go to `target` (a state that
    is not a request state goes nowhere)."""
    if current not in _REQUEST_STATES:
        return False
    return target in REQUEST_TRANSITIONS.get(RequestState(current), frozenset())


class AttemptState(StrEnum):
    """Where one attempt at running a request's job is."""

    QUEUED = "queued"
    SUBMITTING = "submitting"
    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    LOST = "lost"
    NOT_SUBMITTED = "not_submitted"


_A = AttemptState

LIVE_ATTEMPT: frozenset[AttemptState] = frozenset({_A.PENDING, _A.RUNNING, _A.SUSPENDED})
"""The scheduler has the attempt."""

OPEN_ATTEMPT: frozenset[AttemptState] = frozenset({_A.QUEUED, _A.SUBMITTING}) | LIVE_ATTEMPT
"""Not ended yet."""

ENDED_ATTEMPT: frozenset[AttemptState] = frozenset(AttemptState) - OPEN_ATTEMPT
"""Final attempt states: completed, failed, timeout, cancelled, lost, not_submitted."""

_REPORTED_END = frozenset({_A.COMPLETED, _A.FAILED, _A.TIMEOUT, _A.CANCELLED})

ATTEMPT_TRANSITIONS: Mapping[AttemptState, frozenset[AttemptState]] = {
    _A.QUEUED: frozenset({_A.SUBMITTING}),
    _A.SUBMITTING: frozenset({_A.PENDING, _A.NOT_SUBMITTED, _A.LOST}),
    **{live: (LIVE_ATTEMPT - {live}) | _REPORTED_END for live in LIVE_ATTEMPT},
}
"""The states each state may go to; states not listed are final (`ENDED_ATTEMPT`)."""


class ReservationState(StrEnum):
    """Where a reservation (or a cross-brain reservation's part) is."""

    PREPARED = "prepared"
    HELD = "held"
    RELEASED = "released"


RESERVATION_TRANSITIONS: Mapping[ReservationState, frozenset[ReservationState]] = {
    ReservationState.PREPARED: frozenset({ReservationState.HELD, ReservationState.RELEASED}),
    ReservationState.HELD: frozenset({ReservationState.RELEASED}),
}
"""The states each state may go to; released is final."""

HOLDING: frozenset[ReservationState] = frozenset(RESERVATION_TRANSITIONS)
"""Prepared or held: the reservation takes capacity."""
