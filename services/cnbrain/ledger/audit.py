"""What a brain's ledger auditor finds, given the rows it read: pure, no I/O.

Contract:

- `usage_findings`: a resource (a site's compute, an accelerator pool, a link's bandwidth, a
  tenant's quota) whose `used` is not the sum of what its holdings take, or is negative, is
  `used_mismatch`; one whose `used` exceeds its capacity is `over_commit`. Both are only
  reported: the auditor never changes a `used` column but through a release.
- `holding_findings`: a held reservation whose request has ended is `ended_request`; one whose
  request is in any other state that is not runnable (pending, queued) is `not_runnable`
  (reported only). A prepared part past its `expires_at` is `expired_prepared`. A held part
  whose request is not live at its source (ended, or unknown there) is `not_live_at_source`;
  one whose source could not be asked, or is not known, is `unverified` (reported only).
- A finding that is `repairable` is repaired once it is provably lasting: it was found in an
  earlier audit at least `grace_s` before now (`Suspicions` remembers when each was first
  found), or what it is about has been so for at least `grace_s` (`since_s`: the request's
  last change, the part's creation, the prepared part's expiry).
"""

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from cnbrain.domain.states import ENDED_REQUEST, RUNNABLE, ReservationState


class Kind(StrEnum):
    """A kind of finding."""

    OVER_COMMIT = "over_commit"
    USED_MISMATCH = "used_mismatch"
    ENDED_REQUEST = "ended_request"
    NOT_RUNNABLE = "not_runnable"
    EXPIRED_PREPARED = "expired_prepared"
    NOT_LIVE_AT_SOURCE = "not_live_at_source"
    UNVERIFIED = "unverified"


REPAIRABLE: frozenset[Kind] = frozenset(
    {Kind.ENDED_REQUEST, Kind.EXPIRED_PREPARED, Kind.NOT_LIVE_AT_SOURCE}
)
"""Kinds whose object the auditor releases once lasting; the others it only reports."""


@dataclass(frozen=True, slots=True)
class Usage:
    """One `used` column: what it says, what the holdings on it sum to, its capacity (a
    quota's limit; None: unlimited) and what is used of it from outside the brain."""

    where: str
    used: int
    held: int
    cap: int | None
    external: int = 0


@dataclass(frozen=True, slots=True)
class HeldReservation:
    """A held reservation of this brain and its request's state and last change."""

    id: str
    request_id: str
    request_state: str
    since_s: float


@dataclass(frozen=True, slots=True)
class Liveness:
    """What a brain says of some request ids it was asked about: those recorded there and not
    ended (`live`), and those that completed (`completed`: their results may still be on
    their way, so a release of what they hold keeps their deliveries). An id in neither ended
    otherwise, or is not known there."""

    live: frozenset[str] = frozenset()
    completed: frozenset[str] = frozenset()

    @classmethod
    def among(
        cls, asked: Iterable[str], *, live: Iterable[str], completed: Iterable[str]
    ) -> "Liveness":
        """What an answer naming `live` and `completed` ids says of the ids `asked`: an id it
        names that was not asked is left out."""
        wanted = set(asked)
        return cls(
            live=frozenset(wanted.intersection(live)),
            completed=frozenset(wanted.intersection(completed)),
        )


@dataclass(frozen=True, slots=True)
class Part:
    """A prepared or held part of a cross-brain reservation held here. `source` names where
    its request is recorded (a region, or this brain; None: not known, no request recorded),
    where `holding_findings`' `live` comes from; `expires_at_s` is set while it is
    prepared."""

    id: str
    request_id: str
    state: str
    created_at_s: float
    expires_at_s: float | None
    source: str | None


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing found wrong, about `object_id` (a resource, a reservation or a part)."""

    kind: Kind
    object_id: str
    detail: str
    since_s: float | None = None
    """Since when what is found has been so, when known (see the module's contract)."""
    request_id: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.kind.value, self.object_id

    @property
    def repairable(self) -> bool:
        return self.kind in REPAIRABLE


def usage_findings(usages: Iterable[Usage]) -> list[Finding]:
    """`used_mismatch` and `over_commit` findings of `usages`, in their order."""
    found = []
    for usage in usages:
        if usage.used != usage.held or usage.used < 0:
            found.append(
                Finding(
                    Kind.USED_MISMATCH,
                    usage.where,
                    f"used {usage.used} but its holdings sum to {usage.held}",
                )
            )
        if usage.cap is not None and usage.used > usage.cap:
            found.append(
                Finding(Kind.OVER_COMMIT, usage.where, f"used {usage.used} exceeds {usage.cap}")
            )
    return found


def holding_findings(
    *,
    reservations: Iterable[HeldReservation],
    parts: Iterable[Part],
    live: Mapping[str, bool | None],
    now_s: float,
) -> list[Finding]:
    """The findings about held reservations and parts. `live` answers, for the request id of
    every held part, whether it is live at its source (None: the source could not be asked);
    a request missing from it counts as not asked."""
    found = []
    for r in reservations:
        if r.request_state in ENDED_REQUEST:
            found.append(
                Finding(
                    Kind.ENDED_REQUEST,
                    r.id,
                    f"held for request {r.request_id!r}, which is {r.request_state}",
                    since_s=r.since_s,
                    request_id=r.request_id,
                )
            )
        elif r.request_state not in RUNNABLE:
            found.append(
                Finding(
                    Kind.NOT_RUNNABLE,
                    r.id,
                    f"held for request {r.request_id!r}, which is {r.request_state}",
                    request_id=r.request_id,
                )
            )
    for p in parts:
        if p.state == ReservationState.PREPARED:
            if p.expires_at_s is not None and p.expires_at_s <= now_s:
                found.append(
                    Finding(
                        Kind.EXPIRED_PREPARED,
                        p.id,
                        f"prepared for request {p.request_id!r}, expired",
                        since_s=p.expires_at_s,
                        request_id=p.request_id,
                    )
                )
            continue
        if p.state != ReservationState.HELD:
            continue
        answer = live.get(p.request_id) if p.source is not None else None
        if answer is False:
            found.append(
                Finding(
                    Kind.NOT_LIVE_AT_SOURCE,
                    p.id,
                    f"held for request {p.request_id!r}, not live at its source {p.source}",
                    since_s=p.created_at_s,
                    request_id=p.request_id,
                )
            )
        elif answer is None:
            why = (
                f"its source {p.source} could not be asked"
                if p.source is not None
                else "no request is recorded with it"
            )
            found.append(
                Finding(
                    Kind.UNVERIFIED,
                    p.id,
                    f"held for request {p.request_id!r}: {why}",
                    request_id=p.request_id,
                )
            )
    return found


@dataclass(slots=True)
class Suspicions:
    """When each finding (by kind and object) was first found, over the audits since."""

    first_found: dict[tuple[str, str], float] = field(default_factory=dict)

    def update(self, findings: Sequence[Finding], now_s: float) -> None:
        """Remember the findings of the audit at `now_s`; forget those it no longer found."""
        self.first_found = {f.key: self.first_found.get(f.key, now_s) for f in findings}

    def lasting(
        self, findings: Sequence[Finding], *, now_s: float, grace_s: float
    ) -> list[Finding]:
        """The repairable findings of `findings` that are provably lasting at `now_s`: found
        at least `grace_s` ago (call before `update`), or so since at least `grace_s` ago."""
        due = []
        for f in findings:
            if not f.repairable:
                continue
            first = self.first_found.get(f.key)
            if (first is not None and now_s - first >= grace_s) or (
                f.since_s is not None and now_s - f.since_s >= grace_s
            ):
                due.append(f)
        return due


@dataclass(frozen=True, slots=True)
class Report:
    """What one audit found and repaired: counts per kind, and the findings themselves
    (`MAX_LISTED` at most)."""

    at_s: float
    found: Mapping[str, int]
    repaired: Mapping[str, int]
    findings: Sequence[Finding]
    repairs: Sequence[Finding]


MAX_LISTED = 100
"""Findings and repairs a report lists (its counts count them all)."""


def report(
    at_s: float,
    findings: Sequence[Finding],
    repairs: Sequence[Finding],
    *,
    listed: int = MAX_LISTED,
) -> Report:
    """The report of an audit at `at_s` that found `findings` and repaired `repairs`."""
    return Report(
        at_s=at_s,
        found=dict(Counter(f.kind.value for f in findings)),
        repaired=dict(Counter(f.kind.value for f in repairs)),
        findings=tuple(findings[:listed]),
        repairs=tuple(repairs[:listed]),
    )
