"""The state vocabularies: one table per concept, and the named sets agree with it."""

import pytest

from cnbrain.domain.states import (
    ATTEMPT_TRANSITIONS,
    CANCELLABLE,
    ENDED_ATTEMPT,
    ENDED_REQUEST,
    HOLDING,
    LIVE_ATTEMPT,
    OPEN_ATTEMPT,
    RELEASED_AFTER_PLACED,
    REQUEST_TRANSITIONS,
    RESERVATION_TRANSITIONS,
    RUNNABLE,
    AttemptState,
    RequestState,
    ReservationState,
    request_may_go,
)


def test_request_states_keep_their_words() -> None:
    assert [str(s) for s in RequestState] == [
        "pending",
        "queued",
        "placed",
        "submitted",
        "running",
        "suspended",
        "completed",
        "failed",
        "cancelled",
        "rejected",
    ]


def test_runnable_requests_are_those_placed_whose_job_has_not_ended() -> None:
    assert {"placed", "submitted", "running", "suspended"} == RUNNABLE
    assert all(REQUEST_TRANSITIONS[s] for s in RUNNABLE)
    waiting = {RequestState.PENDING, RequestState.QUEUED}
    assert {s for s in REQUEST_TRANSITIONS if s not in waiting} == RUNNABLE


def test_queued_requests_are_admitted_or_end_and_runnable_ones_may_be_requeued() -> None:
    assert REQUEST_TRANSITIONS[RequestState.QUEUED] == {"placed", "rejected", "failed", "cancelled"}
    assert all(RequestState.QUEUED in REQUEST_TRANSITIONS[s] for s in RUNNABLE)
    assert RUNNABLE | {RequestState.QUEUED} == CANCELLABLE


def test_ended_requests_have_no_next_state_and_every_state_is_reached() -> None:
    assert {"completed", "failed", "cancelled", "rejected"} == ENDED_REQUEST
    reached = {RequestState.PENDING}.union(*REQUEST_TRANSITIONS.values())
    assert reached == set(RequestState)
    assert ENDED_REQUEST - {RequestState.REJECTED} == RELEASED_AFTER_PLACED


@pytest.mark.parametrize(
    ("current", "target", "allowed"),
    [
        ("pending", "placed", True),
        ("placed", "submitted", True),
        ("running", "submitted", True),
        ("pending", "running", False),
        ("pending", "queued", True),
        ("queued", "placed", True),
        ("queued", "running", False),
        ("running", "queued", True),
        ("completed", "running", False),
        ("rejected", "placed", False),
        ("no-such-state", "placed", False),
        ("placed", "no-such-state", False),
    ],
)
def test_request_may_go_follows_the_table(current: str, target: str, allowed: bool) -> None:
    assert request_may_go(current, target) is allowed


def test_attempt_sets_partition_the_attempt_states() -> None:
    assert {"pending", "running", "suspended"} == LIVE_ATTEMPT
    assert LIVE_ATTEMPT | {"queued", "submitting"} == OPEN_ATTEMPT
    assert {"completed", "failed", "timeout", "cancelled", "lost", "not_submitted"} == ENDED_ATTEMPT
    assert set(AttemptState) == OPEN_ATTEMPT | ENDED_ATTEMPT
    assert not OPEN_ATTEMPT & ENDED_ATTEMPT
    assert set(ATTEMPT_TRANSITIONS) == OPEN_ATTEMPT
    reached = {AttemptState.QUEUED}.union(*ATTEMPT_TRANSITIONS.values())
    assert reached == set(AttemptState)


def test_reservations_are_prepared_held_then_released() -> None:
    assert {"prepared", "held"} == HOLDING
    assert RESERVATION_TRANSITIONS[ReservationState.PREPARED] == {"held", "released"}
    assert ReservationState.RELEASED not in RESERVATION_TRANSITIONS
