"""What an admission round reads: a queued request's class and deadline."""

from datetime import UTC, datetime, timedelta

from cnbrain.regional.use_cases.admission_inputs import readable, waited_out
from cnbrain.storage.priority_classes import BUILT_IN
from cnbrain.storage.requests import StoredRequest
from tests.regional.bodies import LOCAL_CPU

CREATED = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def _stored(body: dict[str, object], *, queued_after_s: float) -> StoredRequest:
    return StoredRequest(
        id="req-1",
        tenant_id="t",
        user_id="u",
        idempotency_key=None,
        body={**body, "id": "req-1", "tenant": "t"},
        state="queued",
        reason=None,
        site_id=None,
        created_at=CREATED,
        updated_at=CREATED + timedelta(seconds=queued_after_s),
    )


def test_the_max_wait_counts_from_when_the_request_entered_the_queue() -> None:
    # Queued again an hour after it was submitted (it ran, and was preempted).
    body = {**LOCAL_CPU, "start": "queue", "max_wait_s": 600, "priority_class": "low"}
    [queued], unreadable = readable([_stored(body, queued_after_s=3600)], BUILT_IN)
    assert unreadable == []
    assert queued.deadline == int(CREATED.timestamp()) + 3600 + 600
    assert queued.class_name == "low"
    assert waited_out(queued) == "no start within its max wait of 600 s"


def test_a_request_naming_no_class_waits_its_default_classs_max_wait() -> None:
    body = {**LOCAL_CPU, "start": "queue", "priority_class": "deleted-since"}
    [queued], _ = readable([_stored(body, queued_after_s=0)], BUILT_IN)
    assert queued.class_name == "normal"
    assert queued.deadline == int(CREATED.timestamp()) + 86_400
    assert waited_out(queued) == "no start within its class's max wait"


def test_a_stored_body_that_no_longer_reads_is_set_apart() -> None:
    broken = _stored({**LOCAL_CPU, "duration_hours": -1}, queued_after_s=0)
    assert readable([broken], BUILT_IN) == (
        [],
        [(broken, "duration_hours: Input should be greater than 0")],
    )
