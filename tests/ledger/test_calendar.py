"""The calendar's arithmetic: profiles of free capacity over time, and demands on several.

The properties compare a profile with a model that holds the free amount of every integer
second of a small horizon (all windows end inside it; after it the whole capacity is free).
Breakpoints are integers, so agreeing on every second is agreeing everywhere.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cnbrain.domain.errors import Conflict, Invalid, NotFound
from cnbrain.ledger.calendar import (
    Calendar,
    CalendarConflict,
    Profile,
    UnknownResource,
    Window,
)

HORIZON = 40
CAPACITY = 6


def _model_free(capacity: int, takes: Sequence[tuple[Window, int]], t: int) -> int:
    return capacity - sum(amount for w, amount in takes if w.start <= t < w.end)


def _assert_matches(profile: Profile, takes: Sequence[tuple[Window, int]], *, since: int) -> None:
    for t in range(since, HORIZON + 2):
        assert profile.free_at(t) == _model_free(profile.capacity, takes, t), t


def _brute_earliest(
    profile: Profile, amount: int, duration: int, not_before: int, deadline: int
) -> int | None:
    for s in range(max(not_before, profile.now), deadline + 1):
        if all(profile.free_at(t) >= amount for t in range(s, s + duration)):
            return s
    return None


windows = st.builds(
    lambda start, length: Window(start, start + length),
    st.integers(0, HORIZON - 1),
    st.integers(1, 12),
).filter(lambda w: w.end <= HORIZON)
takes = st.lists(st.tuples(windows, st.integers(0, CAPACITY)), max_size=12)


def _filled(takes_: Sequence[tuple[Window, int]]) -> tuple[Profile, list[tuple[Window, int]]]:
    """A profile with every take of `takes_` that fits applied, and the ones it applied."""
    profile = Profile(CAPACITY, now=0)
    applied: list[tuple[Window, int]] = []
    for window, amount in takes_:
        try:
            profile.take(window, amount)
        except CalendarConflict:
            continue
        applied.append((window, amount))
    return profile, applied


# --- windows ---------------------------------------------------------------------------------


def test_a_window_is_half_open_with_start_before_end() -> None:
    window = Window.of(10, 5)
    assert window == Window(10, 15)
    assert window.duration == 5
    assert str(window) == "[10, 15)"


@pytest.mark.parametrize(
    ("start", "end"), [(5, 5), (6, 5), (0, 0)], ids=["zero-length", "reversed", "empty"]
)
def test_an_empty_or_reversed_window_is_refused(start: int, end: int) -> None:
    with pytest.raises(Invalid, match="start < end"):
        Window(start, end)


def test_a_window_takes_integer_seconds_only() -> None:
    with pytest.raises(Invalid, match="integer"):
        Window(0.5, 3)  # type: ignore[arg-type]
    with pytest.raises(Invalid, match="integer"):
        Window(True, 3)
    with pytest.raises(Invalid, match="duration"):
        Window.of(3, 0)


# --- profile arithmetic ----------------------------------------------------------------------


def test_a_new_profile_is_all_free() -> None:
    profile = Profile(10, now=100)
    assert profile.steps() == ((100, 10),)
    assert profile.free_at(100) == profile.free_at(10**9) == 10
    assert profile.min_free(Window(100, 10**9)) == 10


def test_take_lowers_the_window_and_nothing_else() -> None:
    profile = Profile(10, now=0)
    profile.take(Window(5, 10), 4)
    assert profile.steps() == ((0, 10), (5, 6), (10, 10))
    assert [profile.free_at(t) for t in (4, 5, 9, 10)] == [10, 6, 6, 10]
    assert profile.min_free(Window(0, 5)) == 10
    assert profile.min_free(Window(0, 6)) == 6
    assert profile.min_free(Window(9, 20)) == 6
    assert profile.min_free(Window(10, 20)) == 10


def test_adjacent_windows_merge_into_one_step() -> None:
    profile = Profile(10, now=0)
    profile.take(Window(5, 10), 4)
    profile.take(Window(10, 15), 4)
    assert profile.steps() == ((0, 10), (5, 6), (15, 10))
    profile.give(Window(5, 10), 4)
    assert profile.steps() == ((0, 10), (10, 6), (15, 10))


def test_adjacent_windows_each_take_the_whole_capacity() -> None:
    profile = Profile(3, now=0)
    profile.take(Window(0, 5), 3)
    profile.take(Window(5, 9), 3)
    assert profile.min_free(Window(0, 9)) == 0
    with pytest.raises(CalendarConflict, match="0 free at 8"):
        profile.take(Window(8, 10), 1)


def test_overlapping_takes_add_up_and_a_take_that_does_not_fit_takes_nothing() -> None:
    profile = Profile(10, now=0)
    profile.take(Window(0, 10), 6)
    profile.take(Window(5, 15), 4)
    assert profile.free_at(7) == 0
    before = profile.steps()
    with pytest.raises(CalendarConflict, match=r"1 does not fit over \[9, 12\): 0 free at 9"):
        profile.take(Window(9, 12), 1)
    assert profile.steps() == before


def test_the_conflict_is_a_conflict_of_the_error_tree() -> None:
    assert issubclass(CalendarConflict, Conflict)
    assert CalendarConflict.kind == "conflict"
    assert issubclass(UnknownResource, NotFound)


def test_give_never_raises_above_capacity() -> None:
    profile = Profile(10, now=0)
    profile.take(Window(0, 5), 3)
    with pytest.raises(CalendarConflict, match="exceeds the capacity 10: 10 free at 5"):
        profile.give(Window(2, 7), 3)
    assert profile.steps() == ((0, 7), (5, 10))
    profile.give(Window(2, 5), 3)
    assert profile.steps() == ((0, 7), (2, 10))


def test_amounts_are_non_negative_integers() -> None:
    profile = Profile(10, now=0)
    with pytest.raises(Invalid, match="amount"):
        profile.take(Window(0, 5), -1)
    with pytest.raises(Invalid, match="amount"):
        profile.give(Window(0, 5), 1.0)  # type: ignore[arg-type]
    profile.take(Window(0, 5), 0)
    assert profile.steps() == ((0, 10),)
    with pytest.raises(Invalid, match="capacity"):
        Profile(-1, now=0)


def test_earliest_on_a_hand_made_profile() -> None:
    profile = Profile(10, now=0)
    profile.take(Window(0, 10), 8)  # 2 free until 10
    profile.take(Window(20, 30), 5)  # 5 free over [20, 30)
    assert profile.earliest(2, 100, not_before=0, deadline=1000) == 0
    assert profile.earliest(3, 5, not_before=0, deadline=1000) == 10
    assert profile.earliest(3, 10, not_before=0, deadline=1000) == 10
    assert profile.earliest(6, 10, not_before=0, deadline=1000) == 10
    assert profile.earliest(6, 11, not_before=0, deadline=1000) == 30
    assert profile.earliest(6, 5, not_before=12, deadline=1000) == 12
    assert profile.earliest(6, 5, not_before=16, deadline=1000) == 30
    assert profile.earliest(6, 5, not_before=16, deadline=29) is None
    assert profile.earliest(11, 1, not_before=0, deadline=1000) is None
    assert profile.earliest(0, 1, not_before=5, deadline=5) == 5
    assert profile.earliest(3, 1, not_before=5, deadline=4) is None


def test_advance_drops_the_past_and_keeps_the_future() -> None:
    profile = Profile(10, now=0)
    profile.take(Window(0, 10), 4)
    profile.take(Window(5, 20), 2)
    profile.take(Window(30, 40), 1)
    profile.advance(12)
    assert profile.now == 12
    assert profile.steps() == ((12, 8), (20, 10), (30, 9), (40, 10))
    with pytest.raises(Invalid, match="before now"):
        profile.free_at(11)
    with pytest.raises(Invalid, match="does not go back"):
        profile.advance(11)
    profile.advance(45)
    assert profile.steps() == ((45, 10),)


def test_a_window_partly_in_the_past_counts_from_now_only() -> None:
    profile = Profile(10, now=0)
    profile.take(Window(0, 20), 4)
    profile.advance(10)
    assert profile.min_free(Window(0, 15)) == 6
    # The reservation's past part was forgotten with the past: giving it all back is exact.
    profile.give(Window(0, 20), 4)
    assert profile.steps() == ((10, 10),)
    profile.take(Window(5, 12), 10)
    assert profile.steps() == ((10, 0), (12, 10))
    assert profile.earliest(1, 3, not_before=0, deadline=100) == 12


def test_a_window_wholly_in_the_past_holds_nothing() -> None:
    profile = Profile(10, now=50)
    profile.take(Window(0, 50), 10)
    profile.give(Window(10, 20), 10)
    assert profile.steps() == ((50, 10),)
    assert profile.min_free(Window(0, 50)) == 10


# --- profile properties ----------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(takes=takes)
def test_successful_takes_never_go_below_zero_and_refused_ones_change_nothing(
    takes: list[tuple[Window, int]],
) -> None:
    profile = Profile(CAPACITY, now=0)
    applied: list[tuple[Window, int]] = []
    for window, amount in takes:
        fits = all(
            _model_free(CAPACITY, applied, t) >= amount for t in range(window.start, window.end)
        )
        before = profile.steps()
        if fits:
            profile.take(window, amount)
            applied.append((window, amount))
        else:
            with pytest.raises(CalendarConflict):
                profile.take(window, amount)
            assert profile.steps() == before
        assert all(profile.free_at(t) >= 0 for t in range(HORIZON + 2))
        _assert_matches(profile, applied, since=0)
    steps = profile.steps()
    assert all(a[1] != b[1] for a, b in pairwise(steps))
    assert steps[-1][1] == CAPACITY


@settings(max_examples=200, deadline=None)
@given(takes=takes, window=windows, amount=st.integers(0, CAPACITY))
def test_give_after_take_restores_the_profile_exactly(
    takes: list[tuple[Window, int]], window: Window, amount: int
) -> None:
    profile, _ = _filled(takes)
    before = profile.steps()
    try:
        profile.take(window, amount)
    except CalendarConflict:
        assert profile.steps() == before
        return
    profile.give(window, amount)
    assert profile.steps() == before


@settings(max_examples=300, deadline=None)
@given(
    takes=takes,
    now=st.integers(0, 10),
    amount=st.integers(0, CAPACITY + 1),
    duration=st.integers(1, 15),
    not_before=st.integers(0, HORIZON),
    deadline=st.integers(0, HORIZON + 5),
)
def test_earliest_is_the_first_feasible_integer_start(
    takes: list[tuple[Window, int]],
    now: int,
    amount: int,
    duration: int,
    not_before: int,
    deadline: int,
) -> None:
    profile, _ = _filled(takes)
    profile.advance(now)
    found = profile.earliest(amount, duration, not_before=not_before, deadline=deadline)
    assert found == _brute_earliest(profile, amount, duration, not_before, deadline)
    if found is not None:
        assert profile.min_free(Window.of(found, duration)) >= amount
        rises = found == max(not_before, now) or profile.free_at(found - 1) < amount
        assert rises, "a start is not_before or a breakpoint where free capacity rises"


@settings(max_examples=300, deadline=None)
@given(
    free=st.lists(st.integers(0, CAPACITY), min_size=HORIZON, max_size=HORIZON),
    amount=st.integers(1, CAPACITY),
    duration=st.integers(1, HORIZON),
)
def test_earliest_over_a_profile_of_many_steps(free: list[int], amount: int, duration: int) -> None:
    """A profile that changes every second: searches whose windows span many steps."""
    profile = Profile(CAPACITY, now=0)
    for t, left in enumerate(free):
        profile.take(Window(t, t + 1), CAPACITY - left)
    found = profile.earliest(amount, duration, not_before=0, deadline=2 * HORIZON)
    assert found == _brute_earliest(profile, amount, duration, 0, 2 * HORIZON)


def test_a_give_lets_a_search_asked_before_start_earlier() -> None:
    profile = Profile(CAPACITY, now=0)
    profile.take(Window(0, 10), 4)
    profile.take(Window(10, 20), 4)
    assert profile.earliest(4, 3, not_before=0, deadline=HORIZON) == 20
    profile.give(Window(0, 10), 4)
    assert profile.earliest(4, 3, not_before=0, deadline=HORIZON) == 0
    profile.take(Window(0, 2), 4)
    assert profile.earliest(4, 3, not_before=0, deadline=HORIZON) == 2


searches = st.tuples(st.integers(0, CAPACITY), st.integers(1, 8), st.integers(0, HORIZON))
steps = st.lists(
    st.one_of(
        st.tuples(st.just("take"), windows, st.integers(0, CAPACITY)),
        st.tuples(st.just("give back"), st.integers(0, 11)),
        st.tuples(st.just("advance"), st.integers(0, 3)),
        st.tuples(st.just("earliest"), st.integers(0, 2), st.integers(0, HORIZON)),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(asked=st.lists(searches, min_size=1, max_size=3), steps=steps)
def test_earliest_stays_exact_as_takes_gives_and_time_change_the_profile(
    asked: list[tuple[int, int, int]], steps: list[tuple[object, ...]]
) -> None:
    """The same few searches, asked again and again between changes, answer as a search of
    a fresh profile would: what a profile keeps of earlier searches and takes (its least
    free amount, where a search found no earlier start) never changes an answer."""
    profile = Profile(CAPACITY, now=0)
    held: list[tuple[Window, int]] = []
    for step in steps:
        if step[0] == "take":
            window, amount = step[1], step[2]
            assert isinstance(window, Window) and isinstance(amount, int)
            if window.end > profile.now and profile.min_free(window) >= amount:
                profile.take(window, amount)
                held.append((window, amount))
        elif step[0] == "give back" and held:
            assert isinstance(step[1], int)
            window, amount = held.pop(step[1] % len(held))
            if window.end > profile.now:
                profile.give(Window(max(window.start, profile.now), window.end), amount)
        elif step[0] == "advance":
            assert isinstance(step[1], int)
            profile.advance(profile.now + step[1])
        elif step[0] == "earliest":
            assert isinstance(step[1], int) and isinstance(step[2], int)
            amount, duration, not_before = asked[step[1] % len(asked)]
            deadline = step[2] + profile.now
            found = profile.earliest(amount, duration, not_before=not_before, deadline=deadline)
            assert found == _brute_earliest(profile, amount, duration, not_before, deadline)
            assert profile.fits_everywhere(amount) == (
                min(free for _, free in profile.steps()) >= amount
            )


@settings(max_examples=200, deadline=None)
@given(takes=takes, advance_to=st.integers(0, HORIZON))
def test_advance_keeps_every_instant_from_now_on(
    takes: list[tuple[Window, int]], advance_to: int
) -> None:
    profile, applied = _filled(takes)
    profile.advance(advance_to)
    _assert_matches(profile, applied, since=advance_to)
    assert all(time >= advance_to for time, _ in profile.steps())


# --- calendars -------------------------------------------------------------------------------

Key = tuple[str | int, ...]
CPU: Key = ("site", 3, "cpu_m")
MEM: Key = ("site", 3, "mem_mib")
LINK: Key = ("link", 17)


def _calendar() -> Calendar[Key]:
    return Calendar({CPU: 8000, MEM: 16384, LINK: 1000}, now=0)


def test_take_is_all_or_nothing_across_resources() -> None:
    calendar = _calendar()
    calendar.take({LINK: 800}, Window(10, 20))
    before = {key: calendar.profile(key).steps() for key in (CPU, MEM, LINK)}
    demand: dict[Key, int] = {CPU: 4000, MEM: 8192, LINK: 300}
    assert not calendar.fits(demand, Window(0, 15))
    with pytest.raises(CalendarConflict, match=r"\('link', 17\): 300 does not fit"):
        calendar.take(demand, Window(0, 15))
    assert {key: calendar.profile(key).steps() for key in (CPU, MEM, LINK)} == before
    assert calendar.fits(demand, Window(0, 10))
    calendar.take(demand, Window(0, 10))
    assert calendar.profile(CPU).free_at(5) == 4000
    assert calendar.profile(LINK).free_at(5) == 700


def test_give_is_all_or_nothing_across_resources() -> None:
    calendar = _calendar()
    calendar.take({CPU: 1000}, Window(0, 10))
    with pytest.raises(CalendarConflict, match=r"\('site', 3, 'mem_mib'\): giving 1"):
        calendar.give({CPU: 1000, MEM: 1}, Window(0, 10))
    assert calendar.profile(CPU).free_at(0) == 7000
    calendar.give({CPU: 1000}, Window(0, 10))
    assert calendar.profile(CPU).steps() == ((0, 8000),)


def test_a_demand_on_an_unknown_resource_is_refused() -> None:
    calendar = _calendar()
    with pytest.raises(UnknownResource, match="link"):
        calendar.take({CPU: 1, ("link", 99): 1}, Window(0, 10))
    assert calendar.profile(CPU).steps() == ((0, 8000),)
    with pytest.raises(UnknownResource):
        calendar.earliest({("link", 99): 0}, 5, not_before=0, deadline=10)
    assert CPU in calendar
    assert len(calendar) == 3


def test_earliest_waits_for_every_resource_of_the_demand() -> None:
    calendar = _calendar()
    calendar.take({CPU: 8000}, Window(0, 10))
    calendar.take({LINK: 1000}, Window(12, 20))
    calendar.take({MEM: 16384}, Window(25, 30))
    demand: dict[Key, int] = {CPU: 1000, MEM: 1024, LINK: 100}
    assert calendar.earliest(demand, 2, not_before=0, deadline=100) == 10
    assert calendar.earliest(demand, 3, not_before=0, deadline=100) == 20
    assert calendar.earliest(demand, 6, not_before=0, deadline=100) == 30
    assert calendar.earliest(demand, 6, not_before=0, deadline=29) is None
    assert calendar.earliest({}, 6, not_before=7, deadline=29) == 7
    assert calendar.earliest({}, 6, not_before=30, deadline=29) is None


def test_end_early_checks_that_the_end_is_inside_the_window() -> None:
    calendar = _calendar()
    calendar.take({CPU: 1000}, Window(0, 10))
    for at in (-1, 10, 11):
        with pytest.raises(Invalid, match="not within"):
            calendar.end_early({CPU: 1000}, Window(0, 10), at)
    assert calendar.end_early({CPU: 1000}, Window(0, 10), 0) == Window(0, 10)
    assert calendar.profile(CPU).steps() == ((0, 8000),)


def test_end_early_after_advance_gives_back_the_future_only() -> None:
    calendar = _calendar()
    calendar.take({CPU: 1000, LINK: 10}, Window(0, 100))
    calendar.advance(50)
    calendar.end_early({CPU: 1000, LINK: 10}, Window(0, 100), 20)
    assert calendar.profile(CPU).steps() == ((50, 8000),)
    assert calendar.profile(LINK).steps() == ((50, 1000),)
    assert calendar.now == 50
    with pytest.raises(Invalid, match="does not go back"):
        calendar.advance(49)


KEYS = ("a", "b", "c")


@dataclass(frozen=True)
class Booking:
    demand: dict[str, int]
    window: Window


bookings = st.lists(
    st.builds(
        Booking,
        st.dictionaries(st.sampled_from(KEYS), st.integers(0, CAPACITY), max_size=3),
        windows,
    ),
    max_size=10,
)


def _booked(bookings_: Sequence[Booking]) -> tuple[Calendar[str], list[Booking]]:
    calendar = Calendar(dict.fromkeys(KEYS, CAPACITY), now=0)
    applied: list[Booking] = []
    for booking in bookings_:
        if calendar.fits(booking.demand, booking.window):
            calendar.take(booking.demand, booking.window)
            applied.append(booking)
        else:
            with pytest.raises(CalendarConflict):
                calendar.take(booking.demand, booking.window)
    return calendar, applied


def _held(key: str, applied: Sequence[Booking]) -> list[tuple[Window, int]]:
    return [(b.window, b.demand[key]) for b in applied if key in b.demand]


@settings(max_examples=200, deadline=None)
@given(bookings=bookings)
def test_calendar_takes_are_all_or_nothing(bookings: list[Booking]) -> None:
    calendar, applied = _booked(bookings)
    for key in KEYS:
        _assert_matches(calendar.profile(key), _held(key, applied), since=0)


@settings(max_examples=200, deadline=None)
@given(bookings=bookings, chosen=st.integers(0, 9), offset=st.integers(0, 11))
def test_end_early_gives_back_exactly_the_rest_of_the_window(
    bookings: list[Booking], chosen: int, offset: int
) -> None:
    calendar, applied = _booked(bookings)
    if not applied:
        return
    booking = applied[chosen % len(applied)]
    at = booking.window.start + offset % booking.window.duration
    given_back = calendar.end_early(booking.demand, booking.window, at)
    assert given_back == Window(at, booking.window.end)
    shortened = [b for b in applied if b is not booking]
    if at > booking.window.start:
        shortened.append(Booking(booking.demand, Window(booking.window.start, at)))
    for key in KEYS:
        _assert_matches(calendar.profile(key), _held(key, shortened), since=0)


@settings(max_examples=200, deadline=None)
@given(
    bookings=bookings,
    demand=st.dictionaries(st.sampled_from(KEYS), st.integers(0, CAPACITY), max_size=3),
    duration=st.integers(1, 15),
    not_before=st.integers(0, HORIZON),
    deadline=st.integers(0, HORIZON + 5),
)
def test_calendar_earliest_is_the_first_start_where_all_fit(
    bookings: list[Booking],
    demand: dict[str, int],
    duration: int,
    not_before: int,
    deadline: int,
) -> None:
    calendar, _ = _booked(bookings)
    found = calendar.earliest(demand, duration, not_before=not_before, deadline=deadline)
    brute = next(
        (
            s
            for s in range(not_before, deadline + 1)
            if calendar.fits(demand, Window.of(s, duration))
        ),
        None,
    )
    assert found == brute


def test_a_copy_of_a_calendar_changes_apart_from_it() -> None:
    calendar: Calendar[str] = Calendar({"gpu": 8, "cpu": 4}, now=100)
    calendar.take({"gpu": 6}, Window(100, 200))
    twin = calendar.copy()
    twin.take({"gpu": 2, "cpu": 4}, Window(100, 150))
    assert calendar.profile("gpu").steps() == ((100, 2), (200, 8))
    assert calendar.profile("cpu").steps() == ((100, 4),)
    assert twin.profile("gpu").steps() == ((100, 0), (150, 2), (200, 8))
    calendar.give({"gpu": 6}, Window(100, 200))
    assert twin.profile("gpu").free_at(100) == 0


def test_taking_what_is_free_takes_up_to_the_least_free_and_leaves_unknown_resources_out() -> None:
    calendar: Calendar[str] = Calendar({"gpu": 8, "cpu": 4}, now=100)
    calendar.take({"gpu": 5}, Window(120, 140))
    calendar.take_what_is_free({"gpu": 6, "cpu": 1, "link": 9}, Window(100, 130))
    # 3 is free all over the window (5 are held from 120 on): 3 is taken, not 6.
    assert calendar.profile("gpu").steps() == ((100, 5), (120, 0), (130, 3), (140, 8))
    assert calendar.profile("cpu").steps() == ((100, 3), (130, 4))
    assert "link" not in calendar
    with pytest.raises(Invalid):
        calendar.take_what_is_free({"cpu": -1}, Window(100, 130))


def test_taking_up_to_an_amount_takes_what_is_free_at_every_instant() -> None:
    calendar: Calendar[str] = Calendar({"gpu": 8, "cpu": 4}, now=100)
    calendar.take({"gpu": 5}, Window(120, 140))
    calendar.take_up_to({"gpu": 6, "cpu": 1, "link": 9}, Window(90, 150))
    # 6 where 8 are free, 3 where only 3 are; nothing before now.
    assert calendar.profile("gpu").steps() == ((100, 2), (120, 0), (140, 2), (150, 8))
    assert calendar.profile("cpu").steps() == ((100, 3), (150, 4))
    assert "link" not in calendar
    calendar.take_up_to({"gpu": 6}, Window(60, 90))
    assert calendar.profile("gpu").steps() == ((100, 2), (120, 0), (140, 2), (150, 8))
    with pytest.raises(Invalid):
        calendar.take_up_to({"cpu": -1}, Window(100, 130))
