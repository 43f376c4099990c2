"""Why a request waits: the blockers of each option, with the amounts and a sentence.

The property compares them with a brute-force model that holds the free amount of every
integer second of a small horizon.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cnbrain.domain import bounds
from cnbrain.domain.errors import Invalid
from cnbrain.ledger.calendar import Calendar, UnknownResource, Window
from cnbrain.scheduling.backfill import PlanOption
from cnbrain.scheduling.blockers import (
    Blocker,
    Holding,
    OptionBlockers,
    option_blockers,
    why_pending,
)

NOW = int(datetime(2026, 12, 1, 10, 0, tzinfo=UTC).timestamp())
HOUR = 3600

Key = tuple[str, ...]
H800: Key = ("XJ-hub", "acc", "H800")
CPU: Key = ("XJ-hub", "cpu_m")
LINK: Key = ("link", "bj-sh")
NAMES = {H800: "accelerator H800", CPU: "cpu millicores", LINK: "link bj-sh Mbps"}


def describe(key: Key) -> str:
    return NAMES[key]


def named(name: Any) -> Callable[[Key], str]:
    """A `describe` that gives every key `name`."""
    return lambda key: name


def at(hours: float) -> int:
    """The epoch second `hours` after NOW (10:00 UTC)."""
    return NOW + round(hours * HOUR)


def region(
    holdings: Sequence[Holding[Key]],
    *,
    accelerators: int = 64,
    untracked: Sequence[tuple[dict[Key, int], Window]] = (),
) -> Calendar[Key]:
    """A calendar at NOW that holds every holding and the `untracked` windows."""
    calendar = Calendar({H800: accelerators, CPU: 64_000, LINK: 10_000}, now=NOW - HOUR)
    for holding in holdings:
        calendar.take(holding.demand, holding.window)
    for demand, window in untracked:
        calendar.take(demand, window)
    calendar.advance(NOW)
    return calendar


def job(
    request_id: str, end_hours: float, accelerators: int = 16, *, start_hours: float = -1
) -> Holding[Key]:
    return Holding(
        request_id, Window(at(start_hours), at(end_hours)), {H800: accelerators, CPU: 1_000}
    )


def option(**amounts: int) -> PlanOption[Key]:
    keys = {"acc": H800, "cpu": CPU, "link": LINK}
    return PlanOption("XJ-hub", {keys[name]: amount for name, amount in amounts.items()})


THREE_JOBS = [job("j1", 3), job("j2", 4), job("j3", 4.5)]
"""16 accelerators each, ending at 13:00, 14:00 and 14:30: 16 of 64 free at 10:00."""


def blockers_of(
    holdings: Sequence[Holding[Key]],
    wanted: PlanOption[Key],
    *,
    duration: int = 2 * HOUR,
    calendar: Calendar[Key] | None = None,
) -> OptionBlockers:
    return option_blockers(
        region(holdings) if calendar is None else calendar,
        holdings,
        wanted,
        duration=duration,
        describe=describe,
    )


# --- examples ----------------------------------------------------------------------------------


def test_a_key_held_by_running_work_says_how_much_until_when_and_by_how_many() -> None:
    found = blockers_of(THREE_JOBS, option(acc=64, cpu=8_000, link=500))
    assert found.site == "XJ-hub"
    assert not found.fits_now
    assert found.blockers == (
        Blocker(
            name="accelerator H800",
            wants=64,
            capacity=64,
            free_now=16,
            short_from=NOW,
            free_then=16,
            until=at(4.5),
            held_by=3,
            now=NOW,
        ),
    )
    assert found.blockers[0].short == 48
    assert (
        found.text() == "XJ-hub: wants 64 accelerator H800, 16 free; 48 held until 14:30 by 3 jobs"
    )


def test_only_the_holdings_whose_release_is_needed_are_counted() -> None:
    found = blockers_of(THREE_JOBS, option(acc=32))
    (blocker,) = found.blockers
    assert (blocker.short, blocker.until, blocker.held_by) == (16, at(3), 1)
    assert blocker.text() == "wants 32 accelerator H800, 16 free; 16 held until 13:00 by 1 job"


def test_holdings_not_held_at_now_or_not_of_the_key_are_not_counted() -> None:
    holdings = [
        *THREE_JOBS,
        job("ended", 0, start_hours=-1),
        Holding("cpu-only", Window(at(-1), at(1)), {CPU: 4_000}),
        Holding("none-of-it", Window(at(-1), at(1)), {H800: 0, CPU: 1}),
    ]
    (blocker,) = blockers_of(holdings, option(acc=64)).blockers
    assert blocker.held_by == 3


def test_a_key_free_now_but_taken_later_in_the_run_says_from_when() -> None:
    planned = Holding("earlier", Window(at(1.25), at(2.5)), {CPU: 60_000})
    found = blockers_of([planned], option(acc=8, cpu=8_000))
    (blocker,) = found.blockers
    assert blocker == Blocker(
        name="cpu millicores",
        wants=8_000,
        capacity=64_000,
        free_now=64_000,
        short_from=at(1.25),
        free_then=4_000,
        until=at(2.5),
        held_by=0,
        now=NOW,
    )
    assert blocker.short == 0
    assert blocker.text() == (
        "wants 8000 cpu millicores, 64000 free now but 4000 from 11:15; enough from 12:30"
    )


def test_a_key_beyond_its_capacity_never_fits_and_comes_first() -> None:
    holdings = [job("j1", 3, accelerators=16)]
    calendar = region(holdings, accelerators=32)
    found = blockers_of(holdings, option(cpu=64_000, acc=64), calendar=calendar, duration=HOUR)
    assert [(b.name, b.until, b.held_by) for b in found.blockers] == [
        ("accelerator H800", None, 0),
        ("cpu millicores", at(3), 1),
    ]
    assert found.blockers[0].never_fits
    assert found.text() == (
        "XJ-hub: wants 64 accelerator H800, capacity 32: never fits; "
        "and wants 64000 cpu millicores, 63000 free; 1000 held until 13:00 by 1 job"
    )


def test_blockers_come_latest_until_first_and_ties_in_the_options_order() -> None:
    holdings = [
        Holding("short", Window(at(-1), at(1)), {LINK: 10_000}),
        Holding("long", Window(at(-1), at(2)), {CPU: 64_000, H800: 64}),
    ]
    found = blockers_of(holdings, option(link=1, acc=1, cpu=1))
    assert [(b.name, b.until) for b in found.blockers] == [
        ("accelerator H800", at(2)),
        ("cpu millicores", at(2)),
        ("link bj-sh Mbps", at(1)),
    ]


def test_an_amount_held_by_unlisted_work_says_no_count() -> None:
    calendar = region([], untracked=[({H800: 60}, Window(at(-1), at(2)))])
    (blocker,) = blockers_of([], option(acc=8), calendar=calendar).blockers
    assert blocker.held_by == 0
    assert blocker.text() == "wants 8 accelerator H800, 4 free; 4 held until 12:00"


def test_an_option_that_fits_now_has_no_blocker() -> None:
    found = blockers_of(THREE_JOBS, option(acc=16, cpu=60_000, link=10_000))
    assert found.fits_now
    assert found.blockers == ()
    assert found.text() == "XJ-hub: fits now"


def test_a_zero_amount_never_blocks() -> None:
    full = [Holding("all", Window(at(-1), at(5)), {H800: 64, CPU: 64_000, LINK: 10_000})]
    assert blocker_names(blockers_of(full, option(acc=0, cpu=0, link=1))) == ["link bj-sh Mbps"]


def blocker_names(found: OptionBlockers) -> list[str]:
    return [blocker.name for blocker in found.blockers]


def test_each_option_of_a_request_in_order() -> None:
    calendar = Calendar({("s1", "cpu"): 4, ("s2", "cpu"): 4}, now=NOW)
    holdings = [Holding("run", Window(NOW, at(1)), {("s1", "cpu"): 4})]
    calendar.take(holdings[0].demand, holdings[0].window)
    options = [PlanOption("s1", {("s1", "cpu"): 2}), PlanOption("s2", {("s2", "cpu"): 2})]
    found = why_pending(
        calendar, holdings, options, duration=60, describe=lambda key: f"{key[1]} of {key[0]}"
    )
    assert [one.text() for one in found] == [
        "s1: wants 2 cpu of s1, 0 free; 2 held until 11:00 by 1 job",
        "s2: fits now",
    ]


@pytest.mark.parametrize(
    ("end", "text"),
    [
        (at(4.5) - 30, "14:30"),  # rounded up to the minute
        (at(4.5), "14:30"),
        (at(14) - 60, "23:59"),
        (at(14) - 30, "2026-12-02T00:00Z"),  # rounds up into the next day
        (at(17), "2026-12-02T03:00Z"),
        (at(24 * 40), "2027-01-10T10:00Z"),
    ],
)
def test_until_is_a_clock_time_on_the_day_of_now_else_a_date_and_time(end: int, text: str) -> None:
    holdings = [Holding("run", Window(at(-1), end), {H800: 64})]
    (blocker,) = blockers_of(holdings, option(acc=1), duration=60).blockers
    assert blocker.until == end
    assert blocker.text() == f"wants 1 accelerator H800, 0 free; 1 held until {text} by 1 job"


def test_the_start_of_a_shortage_is_rounded_down() -> None:
    planned = Holding("earlier", Window(at(1.25) + 59, at(2.5)), {H800: 64})
    (blocker,) = blockers_of([planned], option(acc=1)).blockers
    assert blocker.text() == (
        "wants 1 accelerator H800, 64 free now but 0 from 11:15; enough from 12:30"
    )


def test_a_time_no_date_holds_is_given_in_epoch_seconds() -> None:
    far = 10**15
    calendar = Calendar({H800: 4}, now=0)
    holdings = [Holding("run", Window(0, far), {H800: 4})]
    calendar.take(holdings[0].demand, holdings[0].window)
    found = option_blockers(
        calendar, holdings, PlanOption("s", {H800: 1}), duration=1, describe=describe
    )
    assert found.blockers[0].text() == (
        f"wants 1 accelerator H800, 0 free; 1 held until epoch second {far} by 1 job"
    )


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("duration", [0, -5, 1.5, True, bounds.MAX_WINDOW_S + 1])
def test_a_duration_out_of_bounds_is_invalid(duration: Any) -> None:
    with pytest.raises(Invalid) as caught:
        option_blockers(region([]), [], option(acc=1), duration=duration, describe=describe)
    assert caught.value.field == "duration"
    with pytest.raises(Invalid) as caught:
        why_pending(region([]), [], [option(acc=1)], duration=duration, describe=describe)
    assert caught.value.field == "duration"


def test_bad_options_names_and_holdings_are_invalid() -> None:
    not_an_int: Any = 2.0
    cases: list[tuple[str, Any]] = [
        ("option.label", PlanOption("", {H800: 1})),
        ("option.demand[('XJ-hub', 'acc', 'H800')]", PlanOption("s", {H800: -1})),
        ("option.demand[('XJ-hub', 'acc', 'H800')]", PlanOption("s", {H800: not_an_int})),
        ("option", {H800: 1}),
    ]
    for field, bad in cases:
        with pytest.raises(Invalid) as caught:
            option_blockers(region([]), [], bad, duration=60, describe=describe)
        assert caught.value.field == field
    full = [Holding("all", Window(at(-1), at(1)), {H800: 64})]
    names: list[Any] = ["", "a\nb", 5]
    for name in names:
        with pytest.raises(Invalid) as caught:
            option_blockers(region(full), full, option(acc=1), duration=60, describe=named(name))
        assert caught.value.field == "describe"
    not_holdings: list[Any] = [object()]
    with pytest.raises(Invalid) as caught:
        option_blockers(region([]), not_holdings, option(acc=1), duration=60, describe=describe)
    assert caught.value.field == "holdings[0]"


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("request_id", ("", Window(0, 1), {H800: 1})),
        ("window", ("r", (0, 1), {H800: 1})),
        ("demand[('XJ-hub', 'acc', 'H800')]", ("r", Window(0, 1), {H800: -1})),
        ("demand", ("r", Window(0, 1), [(H800, 1)])),
    ],
)
def test_bad_holdings_are_invalid(field: str, values: tuple[Any, ...]) -> None:
    with pytest.raises(Invalid) as caught:
        Holding(*values)
    assert caught.value.field == field


def test_a_key_the_calendar_lacks_raises() -> None:
    nowhere: Key = ("nowhere",)
    with pytest.raises(UnknownResource):
        option_blockers(
            region([]), [], PlanOption("s", {nowhere: 1}), duration=60, describe=describe
        )


# --- property ----------------------------------------------------------------------------------


KEYS = ("a", "b", "c")
START = 5
"""The calendar's now in the property: holdings from 0 on, some ended before it."""
HORIZON = 80


@dataclass(frozen=True)
class Region:
    capacities: dict[str, int]
    holdings: tuple[Holding[str], ...]

    def calendar(self) -> Calendar[str]:
        calendar = Calendar(self.capacities, now=0)
        for holding in self.holdings:
            calendar.take(holding.demand, holding.window)
        calendar.advance(START)
        return calendar

    def free(self) -> dict[str, list[int]]:
        free = {key: [capacity] * HORIZON for key, capacity in self.capacities.items()}
        for holding in self.holdings:
            for key, amount in holding.demand.items():
                for t in range(holding.window.start, holding.window.end):
                    free[key][t] -= amount
        return free


def _fitting(capacities: dict[str, int], takes: Sequence[tuple[dict[str, int], Window]]) -> Region:
    calendar = Calendar(capacities, now=0)
    kept = []
    for index, (demand, window) in enumerate(takes):
        if calendar.fits(demand, window):
            calendar.take(demand, window)
            kept.append(Holding(f"h{index}", window, demand))
    return Region(capacities, tuple(kept))


demands = st.dictionaries(st.sampled_from(KEYS), st.integers(0, 5), min_size=1, max_size=3)
windows = st.builds(
    lambda start, length: Window(start, start + length), st.integers(0, 30), st.integers(1, 20)
)
regions = st.builds(
    _fitting,
    st.fixed_dictionaries({key: st.integers(0, 6) for key in KEYS}),
    st.lists(st.tuples(demands, windows), max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(regions, demands, st.integers(1, 20))
def test_blockers_match_a_second_by_second_model_and_none_means_it_fits_now(
    region: Region, demand: dict[str, int], duration: int
) -> None:
    calendar = region.calendar()
    found = option_blockers(
        calendar, region.holdings, PlanOption("s", demand), duration=duration, describe=str
    )
    fits_now = calendar.earliest(demand, duration, not_before=START, deadline=START) == START
    assert found.fits_now == fits_now
    free = region.free()
    run = range(START, START + duration)
    expected = [key for key, wants in demand.items() if any(free[key][t] < wants for t in run)]
    assert sorted(blocker.name for blocker in found.blockers) == sorted(expected)
    for blocker in found.blockers:
        key, wants = blocker.name, blocker.wants
        assert wants == demand[key]
        assert blocker.capacity == region.capacities[key]
        assert blocker.free_now == free[key][START]
        assert blocker.short == max(wants - free[key][START], 0)
        assert blocker.short_from == next(t for t in run if free[key][t] < wants)
        assert blocker.free_then == free[key][blocker.short_from]
        if wants > region.capacities[key]:
            assert blocker.until is None
            assert blocker.held_by == 0
            continue
        until = next(
            s
            for s in range(START, HORIZON - duration)
            if all(free[key][t] >= wants for t in range(s, s + duration))
        )
        assert blocker.until == until
        assert blocker.held_by == sum(
            1
            for h in region.holdings
            if h.demand.get(key, 0) > 0 and h.window.start <= START < h.window.end <= until
        )
    untils = [b.until for b in found.blockers]
    never = [u for u in untils if u is None]
    assert untils[: len(never)] == never
    timed = [u for u in untils if u is not None]
    assert timed == sorted(timed, reverse=True)
    if timed and not never:
        start = calendar.earliest(demand, duration, not_before=START, deadline=HORIZON)
        assert start is not None and start >= timed[0]
