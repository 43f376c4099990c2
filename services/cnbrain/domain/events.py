"""What happened to a request, event by event: its life as its tenant sees it.

A request's events are appended, never changed, in the transaction of the change they tell
of, so the log and the request's state never disagree. Each names its kind, when it happened
and a small `detail` (the site, the attempt, the reason...).

Kinds written today, and the request's state after each:

| kind | when | state after |
| --- | --- | --- |
| `submitted` | the request is stored | pending |
| `placed` | a site (and path) is reserved for it | placed |
| `rejected` | no site fits, a quota is full, capacity kept changing, or wait ran out | rejected |
| `queued` | it asked to wait and joined the admission queue, or it was preempted | queued |
| `planned` | the admission round gave it an estimated start, or moved it | queued |
| `admitted` | the admission round placed it on its planned site | placed |
| `preempted` | a request of a higher class took its place; what it held is released | queued |
| `job_submitted` | an attempt of its job is handed to its site's scheduler | submitted |
| `started` | the scheduler runs the job | running |
| `suspended` | the job is paused | suspended |
| `resumed` | the paused job runs again | running |
| `attempt_ended` | an attempt ended without completing (failed, timeout, lost...) | unchanged |
| `requeued` | the next attempt is queued on the same site | submitted |
| `moved` | the request is placed again on another site, its next attempt queued there | unchanged |
| `rerouted` | a link of its path went down and its path (or one segment) moved | unchanged |
| `not_rerouted` | a link of its path went down and no other path took it (why) | unchanged |
| `ended` | its job completed; everything it held is released | completed |
| `failed` | it could not be decided, or its last attempt ended it | failed |
| `cancelled` | its tenant cancelled it; everything it held is released | cancelled |

"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Final


class RequestEventKind(StrEnum):
    """What happened to a request (see the module docstring)."""

    SUBMITTED = "submitted"
    QUEUED = "queued"
    PLANNED = "planned"
    ADMITTED = "admitted"
    PLACED = "placed"
    REJECTED = "rejected"
    PREEMPTED = "preempted"
    JOB_SUBMITTED = "job_submitted"
    STARTED = "started"
    SUSPENDED = "suspended"
    RESUMED = "resumed"
    ATTEMPT_ENDED = "attempt_ended"
    REQUEUED = "requeued"
    MOVED = "moved"
    REROUTED = "rerouted"
    NOT_REROUTED = "not_rerouted"
    ENDED = "ended"
    FAILED = "failed"
    CANCELLED = "cancelled"


Scalar = str | int | float | bool
"""A value of an event's detail."""

MAX_DETAIL_KEYS: Final = 8
"""Entries of one event's detail."""

MAX_DETAIL_KEY: Final = 32
"""Characters of a detail's name."""

MAX_DETAIL_TEXT: Final = 2000
"""Characters of a detail's text; longer text (a scheduler's message) is cut, ending in "…"."""


def bounded_detail(detail: Mapping[str, Scalar | None]) -> dict[str, Scalar]:
    """`detail` as an event keeps it: without its None values, each text cut to
    `MAX_DETAIL_TEXT` characters. ValueError for more than `MAX_DETAIL_KEYS` entries, a name
    that is empty or longer than `MAX_DETAIL_KEY`, or a value that is not a scalar (these are
    the writers' mistakes, not the tenant's)."""
    kept: dict[str, Scalar] = {}
    for name, value in detail.items():
        if not name or len(name) > MAX_DETAIL_KEY:
            raise ValueError(f"an event's detail name must be 1 to {MAX_DETAIL_KEY} characters")
        if value is None:
            continue
        if not isinstance(value, str | int | float | bool):
            raise ValueError(f"an event's detail {name!r} is not a scalar: {type(value).__name__}")
        if isinstance(value, str) and len(value) > MAX_DETAIL_TEXT:
            value = value[: MAX_DETAIL_TEXT - 1] + "…"
        kept[name] = value
    if len(kept) > MAX_DETAIL_KEYS:
        raise ValueError(f"an event's detail has at most {MAX_DETAIL_KEYS} entries")
    return kept


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """One event of request `request_id`: its `kind`, when it happened (`at`, aware) and its
    `detail`, bounded by `bounded_detail` when the event is made."""

    request_id: str
    kind: RequestEventKind
    at: datetime
    detail: Mapping[str, Scalar] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", RequestEventKind(self.kind))
        object.__setattr__(self, "detail", bounded_detail(self.detail))

    @classmethod
    def of(
        cls, request_id: str, kind: RequestEventKind, at: datetime, **detail: Scalar | None
    ) -> "RequestEvent":
        """The event, its detail given by name (None values are left out)."""
        return cls(request_id, kind, at, bounded_detail(detail))
