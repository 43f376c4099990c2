"""Why a queued request waits: what blocks each of its options, with the amounts.

The calendar is read as it stands before the request is planned: it holds the windows of the
running and admitted work, and may hold the plan of the requests ranked before it. The
holdings are those windows, each with the request that holds it and its demand. For one
option of the request (`backfill.PlanOption`: a site, as a demand over calendar keys) and its
duration, a key of the option is a **blocker** when its amount is not free over the whole run
from now, `[now, now + duration)`. For each blocker (`Blocker`):

- `wants`: the option's amount of the key; `capacity`: the key's whole capacity;
- `free_now`: what is free at now; `short`: what is missing at now, `max(wants - free_now, 0)`
  (0 when the amount is free at now but not for the whole run: a later window, such as the
  plan of an earlier request, takes it from `short_from` on, when `free_then` is free);
- `until`: the earliest time from which `wants` is free over the whole duration on this key
  alone (`Profile.earliest`); None when `wants` exceeds the capacity: it never fits;
- `held_by`: how many holdings hold the key at now and end at or before `until`: the work
  whose release the key waits for (0 when it never fits).

The option starts no earlier than the latest `until` of its blockers, and may start later:
each key is looked at alone. An option with no blocker fits now. The blockers come longest
wait first: those that never fit, then by `until`, latest first, ties in the option's order.

`Blocker.text()` says it in a sentence, e.g. `wants 64 accelerator H800, 16 free; 48 held
until 14:30 by 3 jobs`, naming the key with the caller's `describe`. Times are given to the
minute in UTC: `HH:MM` on the day of now, else the ISO date and time (`2026-12-02T03:00Z`);
`until` rounded up and `short_from` down, so that neither promises more than the calendar.

Cost, per option: O(log n + k) steps read per key of the option (n steps on the key's
profile, k from now to its `until`) and one pass over the holdings. Pure: no clock, no I/O;
the calendar is only read.
"""

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Final, Generic, TypeVar

from cnbrain.domain import bounds
from cnbrain.domain.errors import Invalid
from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.scheduling.backfill import PlanOption
from cnbrain.scheduling.checks import checked_int, checked_name

K = TypeVar("K", bound=Hashable)

MAX_AMOUNT: Final = 2**63 - 1
"""An amount of a resource is at most this (a 64-bit column)."""

_FOREVER: Final = 2**62
"""A time after every breakpoint: the deadline of a search for `until`."""

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _checked_demand(demand: object, field: str) -> Mapping[object, int]:
    if not isinstance(demand, Mapping):
        raise Invalid("must be a mapping of keys to amounts", field=field)
    for key, amount in demand.items():
        checked_int(amount, field=f"{field}[{key!r}]", low=0, high=MAX_AMOUNT)
    return demand


@dataclass(frozen=True, slots=True)
class Holding(Generic[K]):
    """What one running reservation, or the plan of an earlier request, holds on the
    calendar: `demand` over `window`, for request `request_id`. Raises `Invalid` naming the
    field for a bad id, a window that is not a `Window`, or an amount that is not an int
    within [0, `MAX_AMOUNT`]."""

    request_id: str
    window: Window
    demand: Mapping[K, int]

    def __post_init__(self) -> None:
        checked_name(self.request_id, field="request_id")
        if not isinstance(self.window, Window):
            raise Invalid("must be a window", field="window")
        _checked_demand(self.demand, "demand")


@dataclass(frozen=True, slots=True)
class Blocker:
    """One key that keeps an option from starting now, with its amounts (module docstring).
    `name` is the key as `describe` names it, `now` the calendar's now."""

    name: str
    wants: int
    capacity: int
    free_now: int
    short_from: int
    free_then: int
    until: int | None
    held_by: int
    now: int

    @property
    def short(self) -> int:
        """What is missing at now: `max(wants - free_now, 0)`."""
        return max(self.wants - self.free_now, 0)

    @property
    def never_fits(self) -> bool:
        return self.until is None

    def text(self) -> str:
        """The blocker in one sentence (module docstring)."""
        if self.until is None:
            return f"wants {self.wants} {self.name}, capacity {self.capacity}: never fits"
        until = _clock(self.until, self.now, up=True)
        if self.short:
            by = f" by {_jobs(self.held_by)}" if self.held_by else ""
            return (
                f"wants {self.wants} {self.name}, {self.free_now} free; "
                f"{self.short} held until {until}{by}"
            )
        return (
            f"wants {self.wants} {self.name}, {self.free_now} free now but {self.free_then} "
            f"from {_clock(self.short_from, self.now, up=False)}; enough from {until}"
        )


@dataclass(frozen=True, slots=True)
class OptionBlockers:
    """The blockers of one option, on `site` (its label), longest wait first; none when it
    fits now."""

    site: str
    blockers: tuple[Blocker, ...]

    @property
    def fits_now(self) -> bool:
        return not self.blockers

    def text(self) -> str:
        """E.g. `XJ-hub: wants 64 accelerator H800, 16 free; 48 held until 14:30 by 3 jobs`,
        the blockers joined by `; and `, or `XJ-hub: fits now`."""
        if not self.blockers:
            return f"{self.site}: fits now"
        return f"{self.site}: " + "; and ".join(blocker.text() for blocker in self.blockers)


def option_blockers(
    calendar: Calendar[K],
    holdings: Sequence[Holding[K]],
    option: PlanOption[K],
    *,
    duration: int,
    describe: Callable[[K], str],
) -> OptionBlockers:
    """What blocks `option`, run for `duration` seconds (at least 1, at most
    `bounds.MAX_WINDOW_S`), from the calendar's now (module docstring). Raises `Invalid`
    naming the field for a bad duration, label, amount or name, and `UnknownResource` for a
    key of the option the calendar lacks."""
    checked_int(duration, field="duration", low=1, high=bounds.MAX_WINDOW_S)
    return _option_blockers(calendar, _held_now(calendar, holdings), option, duration, describe)


def why_pending(
    calendar: Calendar[K],
    holdings: Sequence[Holding[K]],
    options: Sequence[PlanOption[K]],
    *,
    duration: int,
    describe: Callable[[K], str],
) -> tuple[OptionBlockers, ...]:
    """`option_blockers` of each of `options`, in their order (raises as it does); the
    holdings are sorted out once for all of them."""
    checked_int(duration, field="duration", low=1, high=bounds.MAX_WINDOW_S)
    held = _held_now(calendar, holdings)
    return tuple(_option_blockers(calendar, held, option, duration, describe) for option in options)


def _held_now(calendar: Calendar[K], holdings: Sequence[Holding[K]]) -> list[Holding[K]]:
    """The holdings that hold something at the calendar's now."""
    now = calendar.now
    held: list[Holding[K]] = []
    for index, holding in enumerate(holdings):
        if not isinstance(holding, Holding):
            raise Invalid("must be a holding", field=f"holdings[{index}]")
        if holding.window.start <= now < holding.window.end:
            held.append(holding)
    return held


def _option_blockers(
    calendar: Calendar[K],
    held_now: Sequence[Holding[K]],
    option: PlanOption[K],
    duration: int,
    describe: Callable[[K], str],
) -> OptionBlockers:
    if not isinstance(option, PlanOption):
        raise Invalid("must be a plan option", field="option")
    site = checked_name(option.label, field="option.label")
    _checked_demand(option.demand, "option.demand")
    now = calendar.now
    run = Window.of(now, duration)
    found: list[tuple[K, Blocker]] = []
    for key, wants in option.demand.items():
        profile = calendar.profile(key)
        short_from = profile.first_short(run, wants)
        if short_from is None:
            continue
        until = profile.earliest(wants, duration, not_before=now, deadline=_FOREVER)
        blocker = Blocker(
            name=checked_name(describe(key), field="describe"),
            wants=wants,
            capacity=profile.capacity,
            free_now=profile.free_at(now),
            short_from=short_from,
            free_then=profile.free_at(short_from),
            until=until,
            held_by=0,
            now=now,
        )
        found.append((key, blocker))
    counts = _released_by(held_now, {key: b.until for key, b in found if b.until is not None})
    blockers = [replace(blocker, held_by=counts.get(key, 0)) for key, blocker in found]
    # Stable: ties keep the option's order.
    blockers.sort(key=lambda b: (b.until is not None, -(b.until or 0)))
    return OptionBlockers(site, tuple(blockers))


def _released_by(held_now: Sequence[Holding[K]], until: Mapping[K, int]) -> dict[K, int]:
    """Per key of `until`, how many of the holdings (all holding something at now) hold it
    and end at or before its time."""
    counts: dict[K, int] = {}
    if not until:
        return counts
    for holding in held_now:
        end = holding.window.end
        for key, amount in holding.demand.items():
            limit = until.get(key)
            if amount > 0 and limit is not None and end <= limit:
                counts[key] = counts.get(key, 0) + 1
    return counts


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"


def _clock(t: int, now: int, *, up: bool) -> str:
    """`t` to the minute (rounded up or down) in UTC: `HH:MM` on the UTC day of `now`, else
    the ISO date and time; `epoch second t` for a time no date can hold."""
    minute = -(-t // 60) * 60 if up else t // 60 * 60
    try:
        at = _EPOCH + timedelta(seconds=minute)
        today = (_EPOCH + timedelta(seconds=now)).date()
    except OverflowError:
        return f"epoch second {t}"
    if at.date() == today:
        return at.strftime("%H:%M")
    return at.strftime("%Y-%m-%dT%H:%MZ")
