"""Request events: their kinds, and the bounds of their detail."""

from datetime import UTC, datetime

import pytest

from cnbrain.domain.events import (
    MAX_DETAIL_KEYS,
    MAX_DETAIL_TEXT,
    RequestEvent,
    RequestEventKind,
    bounded_detail,
)

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_the_issue_names_every_kind_the_admission_queue_will_write() -> None:
    named = {"submitted", "queued", "planned", "admitted", "preempted", "requeued", "started"}
    assert named | {"ended"} <= set(RequestEventKind)


def test_an_event_keeps_its_detail_without_nones_and_cuts_long_text() -> None:
    event = RequestEvent.of(
        "req-1", RequestEventKind.FAILED, AT, attempt=3, reason="x" * 5000, site=None, ok=True
    )
    assert set(event.detail) == {"attempt", "reason", "ok"}
    assert event.detail["attempt"] == 3 and event.detail["ok"] is True
    reason = event.detail["reason"]
    assert isinstance(reason, str) and len(reason) == MAX_DETAIL_TEXT and reason.endswith("…")


def test_a_kind_given_as_text_becomes_the_kind() -> None:
    event = RequestEvent("req-1", "placed", AT, {"site": "A"})  # type: ignore[arg-type]
    assert event.kind is RequestEventKind.PLACED
    with pytest.raises(ValueError):
        RequestEvent("req-1", "teleported", AT)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "detail",
    [
        {f"k{i}": i for i in range(MAX_DETAIL_KEYS + 1)},
        {"": 1},
        {"k" * 33: 1},
        {"sites": ["a", "b"]},
        {"nested": {"a": 1}},
    ],
)
def test_a_detail_out_of_bounds_is_refused(detail: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="detail"):
        bounded_detail(detail)  # type: ignore[arg-type]
