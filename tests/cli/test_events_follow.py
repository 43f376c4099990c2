"""`cnbrain events --follow` prints each event once as it comes, known by what it is rather
than by its place in the list: the API orders events by time, so one stored late with an
earlier time comes before those already printed."""

import json
from typing import Any

import pytest

from cnbrain.cli.events import follow
from cnbrain.cli.output import JSON


def _event(kind: str, at: str, **detail: Any) -> dict[str, Any]:
    return {"kind": kind, "at": at, "detail": detail}


def _followed(reads: list[tuple[str, list[dict[str, Any]]]], capsys: Any) -> list[Any]:
    """What `follow` prints (one JSON object a line) over `reads`: (state, events) each."""
    answers = iter(reads)
    current: list[dict[str, Any]] = []

    def state() -> str:
        nonlocal current
        now, current = next(answers)
        return now

    assert follow(state, lambda: current, output=JSON, pause=lambda: None) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_an_event_stored_late_with_an_earlier_time_is_printed_and_none_twice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    placed = _event("placed", "2026-12-06T10:00:02Z", site="ZJ-hz-1")
    late = _event("planned", "2026-12-06T10:00:01Z")
    running = _event("running", "2026-12-06T10:00:03Z")
    done = _event("completed", "2026-12-06T10:00:04Z")
    printed = _followed(
        [
            ("placed", [placed]),
            ("running", [late, placed, running]),
            ("completed", [late, placed, running, done]),
        ],
        capsys,
    )
    assert printed == [placed, late, running, done]


def test_two_events_alike_in_everything_are_both_printed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    one = _event("planned", "2026-12-06T10:00:01Z")
    ended = _event("cancelled", "2026-12-06T10:00:02Z")
    printed = _followed([("queued", [one]), ("cancelled", [one, one, ended])], capsys)
    assert printed == [one, one, ended]
