"""Demands whose parts hold different windows around one start, on the calendar.

The property plans random flows (parts before, during and after the start, some on the same
link at overlapping times) one after another at their earliest start and checks, against a
model of every second, that the earliest start is the first second at which all parts fit,
and that no link's calendar is ever above its bandwidth or below zero.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cnbrain.domain.errors import Invalid
from cnbrain.ledger.calendar import Calendar, CalendarConflict, Window
from cnbrain.ledger.timed_demand import Part, TimedDemand

HORIZON = 60
CAPACITY = 10


def test_parts_on_one_key_merge_into_disjoint_steps() -> None:
    demand = TimedDemand(
        [Part("l", 3, -10, 10), Part("l", 2, -5, 20), Part("c", 1, 0, 7), Part("l", 0, 0, 3)]
    )
    assert sorted((p.key, p.amount, p.offset, p.duration) for p in demand.parts) == [
        ("c", 1, 0, 7),
        ("l", 2, 0, 15),
        ("l", 3, -10, 5),
        ("l", 5, -5, 5),
    ]
    assert demand.lead == 10
    assert TimedDemand([Part("c", 1, 0, 5)]).lead == 0


@pytest.mark.parametrize(
    ("field", "part"),
    [
        ("amount", lambda: Part("k", -1, 0, 1)),
        ("duration", lambda: Part("k", 1, 0, 0)),
        ("offset", lambda: Part("k", 1, 0.5, 1)),  # type: ignore[arg-type]
        ("amount", lambda: Part("k", True, 0, 1)),
    ],
)
def test_a_bad_part_names_its_field(field: str, part: object) -> None:
    with pytest.raises(Invalid) as info:
        part()  # type: ignore[operator]
    assert info.value.field == field


def test_staging_before_the_start_waits_for_its_link_and_holds_nothing_before_now() -> None:
    calendar = Calendar({"link": 10, "gpu": 4}, now=100)
    calendar.take({"link": 8}, Window(100, 200))
    # Staging 5 Mbps for 30 s before the start, then 4 GPUs for 50 s.
    demand = TimedDemand([Part("link", 5, -30, 30), Part("gpu", 4, 0, 50)])
    assert demand.earliest(calendar, not_before=0, deadline=1000) == 230
    calendar.take({"gpu": 1}, Window(230, 250))
    assert demand.earliest(calendar, not_before=0, deadline=1000) == 250
    assert demand.earliest(calendar, not_before=0, deadline=249) is None
    demand.take(calendar, 250)
    assert calendar.profile("link").free_at(220) == 5
    assert calendar.profile("gpu").free_at(260) == 0
    demand.give(calendar, 250)
    assert calendar.profile("link").free_at(220) == 10
    assert calendar.profile("gpu").free_at(260) == 4


def test_take_is_all_or_nothing() -> None:
    calendar = Calendar({"a": 5, "b": 5}, now=0)
    calendar.take({"b": 5}, Window(10, 20))
    demand = TimedDemand([Part("a", 5, 0, 10), Part("b", 1, 10, 5)])
    with pytest.raises(CalendarConflict):
        demand.take(calendar, 0)
    assert calendar.profile("a").free_at(0) == 5
    assert calendar.profile("b").free_at(15) == 0


def _model(takes: list[tuple[str, int, int, int]], key: str, t: int) -> int:
    return CAPACITY - sum(a for k, a, lo, hi in takes if k == key and lo <= t < hi)


def _fits(
    demand: TimedDemand[str], taken: list[tuple[str, int, int, int]], now: int, start: int
) -> bool:
    """Whether every part of `demand` fits at `start` in the per-second model."""
    return all(
        start + p.offset >= now
        and all(
            _model(taken, p.key, t) >= p.amount
            for t in range(start + p.offset, start + p.offset + p.duration)
        )
        for p in demand.parts
    )


parts = st.tuples(
    st.sampled_from(["l1", "l2", "l3"]),
    st.integers(0, CAPACITY + 1),
    st.integers(-8, 8),
    st.integers(1, 10),
)


@settings(max_examples=150, deadline=None)
@given(
    demands=st.lists(st.lists(parts, min_size=1, max_size=4), min_size=1, max_size=8),
    now=st.integers(0, 5),
)
def test_no_link_calendar_ever_exceeds_its_bandwidth(
    demands: list[list[tuple[str, int, int, int]]], now: int
) -> None:
    calendar = Calendar(dict.fromkeys(["l1", "l2", "l3"], CAPACITY), now=now)
    taken: list[tuple[str, int, int, int]] = []
    for raw in demands:
        demand = TimedDemand([Part(*p) for p in raw])
        start = demand.earliest(calendar, not_before=now, deadline=HORIZON)

        brute = next((s for s in range(now, HORIZON + 1) if _fits(demand, taken, now, s)), None)
        assert start == brute
        if start is None:
            continue
        demand.take(calendar, start)
        taken += [
            (p.key, p.amount, start + p.offset, start + p.offset + p.duration) for p in demand.parts
        ]
        for key in ("l1", "l2", "l3"):
            profile = calendar.profile(key)
            for t in range(now, HORIZON + 20):
                assert 0 <= profile.free_at(t) == _model(taken, key, t) <= CAPACITY
