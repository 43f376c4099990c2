"""A demand whose parts hold their resources over different windows around one start.

A job that moves data holds a link for its staging before it starts, its compute while it
runs and another link for its results after it ends. Each `Part` holds `amount` of one
calendar key over `[start + offset, start + offset + duration)`, for a start still to be
chosen. `TimedDemand` merges the parts on one key into disjoint steps (two flows crossing
one link at overlapping times hold their sum there), so each instant of a key is held by one
part, and finds on a `Calendar` the earliest start at which every part fits (`earliest`),
takes (`take`) and gives back (`give`) all of them at one start, all or nothing.
"""

from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import Generic, TypeVar

from cnbrain.domain.errors import Invalid
from cnbrain.ledger.calendar import Calendar, Window

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Part(Generic[K]):
    """`amount` of `key` over `[start + offset, start + offset + duration)`; the offset may be
    negative (held before the start), the duration is at least 1 second."""

    key: K
    amount: int
    offset: int
    duration: int

    def __post_init__(self) -> None:
        amount, offset, duration = self.amount, self.offset, self.duration
        if type(amount) is not int or type(offset) is not int or type(duration) is not int:
            for name in ("amount", "offset", "duration"):
                value = getattr(self, name)
                if type(value) is not int:  # bool, float and numpy integers too
                    raise Invalid(f"must be an integer, not {value!r}", field=name)
        if amount < 0:
            raise Invalid(f"must be at least 0, not {amount}", field="amount")
        if duration < 1:
            raise Invalid(f"must be at least 1, not {duration}", field="duration")

    def window(self, start: int) -> Window:
        return Window.of(start + self.offset, self.duration)


class TimedDemand(Generic[K]):
    """Parts merged per key into disjoint steps of positive amount (module docstring).
    `lead` is how long before the start the first part begins (0 when none does)."""

    __slots__ = ("lead", "parts")

    def __init__(self, parts: Iterable[Part[K]]) -> None:
        by_key: dict[K, list[Part[K]]] = defaultdict(list)
        for part in parts:
            if part.amount:
                by_key[part.key].append(part)
        merged: list[Part[K]] = []
        for key, held in by_key.items():
            merged.extend(_steps(key, held))
        self.parts: tuple[Part[K], ...] = tuple(merged)
        self.lead: int = max([0, *(-p.offset for p in merged)])

    def earliest(self, calendar: Calendar[K], *, not_before: int, deadline: int) -> int | None:
        """The earliest start `s`, `not_before <= s <= deadline`, with no part before the
        calendar's now, at which every part fits; None if there is none.

        Leapfrog, as `Calendar.earliest`: each part in turn moves the candidate start to the
        earliest from which it fits, until all of them agree on one. Every move passes a
        breakpoint of one profile, so this ends."""
        start = max(not_before, calendar.now + self.lead)
        if start > deadline:
            return None
        held = ((calendar.profile(p.key), p) for p in self.parts)
        short = [(profile, p) for profile, p in held if not profile.fits_everywhere(p.amount)]
        agreed = 0
        i = 0
        while agreed < len(short):
            profile, part = short[i]
            fit = profile.earliest(
                part.amount,
                part.duration,
                not_before=start + part.offset,
                deadline=deadline + part.offset,
            )
            if fit is None:
                return None
            if fit == start + part.offset:
                agreed += 1
            else:
                start = fit - part.offset
                agreed = 1
            i = (i + 1) % len(short)
        return start

    def take(self, calendar: Calendar[K], start: int) -> None:
        """Take every part at `start`, all or nothing: raises `CalendarConflict` (and takes
        nothing) when one does not fit."""
        taken: list[Part[K]] = []
        try:
            for part in self.parts:
                calendar.take({part.key: part.amount}, part.window(start))
                taken.append(part)
        except Exception:
            for part in reversed(taken):
                calendar.give({part.key: part.amount}, part.window(start))
            raise

    def give(self, calendar: Calendar[K], start: int) -> None:
        """Give back every part taken at `start`."""
        for part in self.parts:
            calendar.give({part.key: part.amount}, part.window(start))


def _steps(key: K, parts: list[Part[K]]) -> list[Part[K]]:
    """The parts on one key as disjoint steps: the summed amount between each two
    consecutive part ends, adjacent steps of equal amount joined, zero steps dropped."""
    if len(parts) == 1:
        return parts
    edges = sorted({p.offset for p in parts} | {p.offset + p.duration for p in parts})
    steps: list[Part[K]] = []
    for lo, hi in pairwise(edges):
        amount = sum(p.amount for p in parts if p.offset <= lo and hi <= p.offset + p.duration)
        if not amount:
            continue
        last = steps[-1] if steps else None
        if last is not None and last.amount == amount and last.offset + last.duration == lo:
            steps[-1] = Part(key, amount, last.offset, last.duration + hi - lo)
        else:
            steps.append(Part(key, amount, lo, hi - lo))
    return steps
