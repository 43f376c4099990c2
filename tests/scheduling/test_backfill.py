"""Conservative backfill over the calendar: each item planned in rank order at its earliest
start, around the items before it only.

The properties compare the planner with a brute-force model that holds the free amount of
every integer second of a small horizon and tries every start second by second.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cnbrain.domain.errors import Invalid
from cnbrain.ledger.calendar import Calendar, UnknownResource, Window
from cnbrain.ledger.node_starts import SiteNodes
from cnbrain.ledger.nodes import Gang, NodeTake, Pool
from cnbrain.ledger.timed_demand import Part, TimedDemand
from cnbrain.scheduling import congestion
from cnbrain.scheduling.backfill import (
    NoStart,
    PlanItem,
    Planned,
    PlanOption,
    choose,
    plan,
    shortlist,
)

KEYS = ("a", "b", "c")
HORIZON = 80
"""Every window ends before this: deadlines and durations below are bounded so."""


@dataclass(frozen=True)
class Region:
    """A calendar's capacities and the windows of its running work, to build it afresh."""

    capacities: dict[str, int]
    running: tuple[tuple[dict[str, int], Window], ...]

    def calendar(self) -> Calendar[str]:
        calendar = Calendar(self.capacities, now=0)
        for demand, window in self.running:
            calendar.take(demand, window)
        return calendar


def _fitting_running(
    capacities: dict[str, int], takes: Sequence[tuple[dict[str, int], Window]]
) -> Region:
    calendar = Calendar(capacities, now=0)
    kept = []
    for demand, window in takes:
        if calendar.fits(demand, window):
            calendar.take(demand, window)
            kept.append((demand, window))
    return Region(capacities, tuple(kept))


demands = st.dictionaries(st.sampled_from(KEYS), st.integers(0, 5), min_size=1, max_size=3)
windows = st.builds(
    lambda start, length: Window(start, start + length), st.integers(0, 20), st.integers(1, 15)
)
regions = st.builds(
    _fitting_running,
    st.fixed_dictionaries({key: st.integers(0, 6) for key in KEYS}),
    st.lists(st.tuples(demands, windows), max_size=6),
)


def _item(
    index: int, options: list[dict[str, int]], duration: int, not_before: int, wait: int
) -> PlanItem[str]:
    return PlanItem(
        id=f"r{index}",
        options=tuple(PlanOption(f"o{i}", demand) for i, demand in enumerate(options)),
        duration=duration,
        not_before=not_before,
        deadline=not_before + wait,
    )


def _items(min_size: int = 0, max_size: int = 8) -> st.SearchStrategy[list[PlanItem[str]]]:
    one = st.tuples(
        st.lists(demands, min_size=0, max_size=3),
        st.integers(1, 15),
        st.integers(0, 10),
        st.integers(-2, 30),
    )
    return st.lists(one, min_size=min_size, max_size=max_size).map(
        lambda specs: [_item(i, *spec) for i, spec in enumerate(specs)]
    )


def _priced(item: PlanItem[str], objectives: Sequence[float]) -> PlanItem[str]:
    """`item` with every option priced: its demand held over the run as timed parts, its
    objective the next of `objectives` in turn, every key of its demand its compute."""
    options = tuple(
        PlanOption(
            option.label,
            option.demand,
            timed=TimedDemand(Part(k, a, 0, item.duration) for k, a in option.demand.items()),
            objective=objectives[i % len(objectives)],
            compute=frozenset(option.demand),
        )
        for i, option in enumerate(item.options)
    )
    return PlanItem(item.id, options, item.duration, item.not_before, item.deadline)


def _priced_items(max_size: int = 8) -> st.SearchStrategy[list[PlanItem[str]]]:
    objectives = st.lists(st.floats(0, 2, allow_nan=False), min_size=1, max_size=5)
    return st.tuples(_items(max_size=max_size), objectives).map(
        lambda pair: [_priced(item, pair[1][i:] + pair[1][:i]) for i, item in enumerate(pair[0])]
    )


def _sited(item: PlanItem[str], objectives: Sequence[float], sites: int) -> PlanItem[str]:
    """`item` priced (`_priced`), its options on the sites `s0`..`s2` in turn (a site's
    options share its objective), `a` and `b` its compute and `c` a link, planned on at most
    `sites` sites."""
    options = tuple(
        PlanOption(
            f"s{i % 3}",
            option.demand,
            timed=option.timed,
            objective=objectives[i % 3 % len(objectives)],
            compute=frozenset(option.demand) - {"c"},
        )
        for i, option in enumerate(_priced(item, objectives).options)
    )
    return PlanItem(item.id, options, item.duration, item.not_before, item.deadline, sites=sites)


def _sited_items(max_size: int = 8) -> st.SearchStrategy[list[PlanItem[str]]]:
    objectives = st.lists(st.floats(0, 2, allow_nan=False), min_size=1, max_size=3)
    return st.tuples(_items(max_size=max_size), objectives, st.integers(1, 3)).map(
        lambda spec: [_sited(item, spec[1], spec[2]) for item in spec[0]]
    )


def _earliest_by_seconds(
    free: dict[str, list[int]], item: PlanItem[str], demand: Mapping[str, int]
) -> int | None:
    for s in range(item.not_before, item.deadline + 1):
        if all(
            free[key][t] >= amount
            for key, amount in demand.items()
            for t in range(s, s + item.duration)
        ):
            return s
    return None


def _free_of(region: Region) -> dict[str, list[int]]:
    free = {key: [capacity] * HORIZON for key, capacity in region.capacities.items()}
    for demand, window in region.running:
        for key, amount in demand.items():
            for t in range(window.start, window.end):
                free[key][t] -= amount
    return free


def _hold(free: dict[str, list[int]], demand: Mapping[str, int], window: Window) -> None:
    for key, amount in demand.items():
        for t in range(window.start, window.end):
            free[key][t] -= amount


def _reference(region: Region, items: Sequence[PlanItem[str]]) -> list[tuple[int, int] | None]:
    """(option, start) of each item, or None, by trying every second of every option."""
    free = _free_of(region)
    answers: list[tuple[int, int] | None] = []
    for item in items:
        best: tuple[int, int] | None = None
        for index, option in enumerate(item.options):
            s = _earliest_by_seconds(free, item, option.demand)
            if s is not None and (best is None or s < best[1]):
                best = (index, s)
        answers.append(best)
        if best is not None:
            index, s = best
            _hold(free, item.options[index].demand, Window.of(s, item.duration))
    return answers


def _priced_reference(
    region: Region, items: Sequence[PlanItem[str]]
) -> list[tuple[int, int] | None]:
    """(option, start) of each priced item, or None: every option's earliest start by trying
    every second, the lowest `congestion.score` among them (ties: earlier start, earlier
    option), each score read on a calendar holding the items before it."""
    free = _free_of(region)
    calendar = region.calendar()
    answers: list[tuple[int, int] | None] = []
    for item in items:
        kept = _shortlist_reference(free, calendar, item)
        starts = [
            (s, index)
            for index, option in enumerate(item.options)
            if index in kept and (s := _earliest_by_seconds(free, item, option.demand)) is not None
        ]
        best: tuple[int, int] | None = None
        if starts:
            first = min(s for s, _ in starts)
            scored = []
            for s, index in starts:
                option = item.options[index]
                assert option.timed is not None and option.objective is not None
                score = congestion.score(
                    calendar,
                    option.timed,
                    option.compute,
                    s,
                    first_start=first,
                    duration=item.duration,
                    objective=option.objective,
                )
                scored.append((score, s, index))
            _, s, index = min(scored)
            best = (index, s)
            window = Window.of(s, item.duration)
            _hold(free, item.options[index].demand, window)
            calendar.take(item.options[index].demand, window)
        answers.append(best)
    return answers


def _shortlist_reference(
    free: dict[str, list[int]], calendar: Calendar[str], item: PlanItem[str]
) -> set[int]:
    """The indices of the options on the item's `sites` best sites: each site scored by its
    first option's compute alone at its earliest start, tried second by second, the delay
    from `not_before` (no start: after every site with one); ties to the earlier site."""
    by_site: dict[str, list[int]] = {}
    for index, option in enumerate(item.options):
        by_site.setdefault(option.label, []).append(index)
    if item.sites is None or len(by_site) <= item.sites:
        return set(range(len(item.options)))
    estimated = []
    for rank, (label, indices) in enumerate(by_site.items()):
        option = item.options[indices[0]]
        assert option.objective is not None
        compute = {k: a for k, a in option.demand.items() if k in option.compute}
        s = _earliest_by_seconds(free, item, compute)
        score = float("inf")
        if s is not None:
            held = TimedDemand(Part(k, a, 0, item.duration) for k, a in compute.items())
            score = congestion.score(
                calendar,
                held,
                option.compute,
                s,
                first_start=item.not_before,
                duration=item.duration,
                objective=option.objective,
            )
        estimated.append((score, rank, label))
    kept = {label for _, _, label in sorted(estimated)[: item.sites]}
    return {i for i, option in enumerate(item.options) if option.label in kept}


def _outcomes(results: Sequence[Planned | NoStart]) -> list[tuple[int, int] | None]:
    return [(r.option, r.start) if isinstance(r, Planned) else None for r in results]


# --- properties -------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(regions, _items())
def test_each_item_gets_its_earliest_start_around_the_items_before_it(
    region: Region, items: list[PlanItem[str]]
) -> None:
    results = plan(region.calendar(), items)
    assert [r.id for r in results] == [item.id for item in items]
    assert _outcomes(results) == _reference(region, items)
    for result in results:
        if isinstance(result, Planned):
            assert result.starts_now == (result.start == 0)


@settings(max_examples=200, deadline=None)
@given(regions, _items(), _items(min_size=1))
def test_appending_later_items_never_moves_an_earlier_planned_start(
    region: Region, items: list[PlanItem[str]], later: list[PlanItem[str]]
) -> None:
    _assert_appended_move_nothing(region, items, later)


def _assert_appended_move_nothing(
    region: Region, items: list[PlanItem[str]], later: list[PlanItem[str]]
) -> None:
    """Planning `later` after `items` leaves the plans of `items` as they are alone."""
    renamed = [
        PlanItem(f"later-{i}", item.options, item.duration, item.not_before, item.deadline)
        for i, item in enumerate(later)
    ]
    alone = plan(region.calendar(), items)
    together = plan(region.calendar(), items + renamed)
    assert together[: len(items)] == alone


@settings(max_examples=200, deadline=None)
@given(regions, _items(max_size=10))
def test_no_instant_exceeds_capacity(region: Region, items: list[PlanItem[str]]) -> None:
    _assert_within_capacity(region, items)


def _assert_within_capacity(region: Region, items: list[PlanItem[str]]) -> None:
    """Planning `items` holds at no instant more than a key's capacity, and the calendar
    shows what they and the running work hold."""
    calendar = region.calendar()
    results = plan(calendar, items)
    held = [*region.running]
    for item, result in zip(items, results, strict=True):
        if isinstance(result, Planned):
            held.append((dict(item.options[result.option].demand), result.window))
    for key, capacity in region.capacities.items():
        for t in range(HORIZON):
            used = sum(d.get(key, 0) for d, w in held if w.start <= t < w.end)
            assert used <= capacity
            assert calendar.profile(key).free_at(t) == capacity - used


@settings(max_examples=200, deadline=None)
@given(regions, _items(min_size=1, max_size=1), _items(min_size=1, max_size=1))
def test_a_later_item_starts_now_only_where_the_earlier_one_does_not_move(
    region: Region, big: list[PlanItem[str]], small: list[PlanItem[str]]
) -> None:
    first = big[0]
    second = PlanItem("small", small[0].options, small[0].duration, 0, small[0].deadline)
    (first_alone,) = plan(region.calendar(), [first])
    calendar = region.calendar()
    first_planned, second_planned = plan(calendar, [first, second])
    assert first_planned == first_alone
    # The small one starts now exactly when one of its options fits now around the big one.
    around = region.calendar()
    plan(around, [first])
    fits_now = any(
        around.fits(option.demand, Window.of(0, second.duration)) for option in second.options
    )
    assert (isinstance(second_planned, Planned) and second_planned.starts_now) == (
        fits_now and second.deadline >= 0
    )


@settings(max_examples=300, deadline=None)
@given(regions, _priced_items())
def test_a_priced_item_gets_the_cheapest_of_its_options_earliest_starts(
    region: Region, items: list[PlanItem[str]]
) -> None:
    results = plan(region.calendar(), items)
    assert _outcomes(results) == _priced_reference(region, items)


@settings(max_examples=300, deadline=None)
@given(regions, _sited_items())
def test_a_priced_item_is_planned_on_its_best_sites_by_their_compute_on_the_calendar(
    region: Region, items: list[PlanItem[str]]
) -> None:
    results = plan(region.calendar(), items)
    assert _outcomes(results) == _priced_reference(region, items)


@settings(max_examples=200, deadline=None)
@given(regions, _sited_items(), _sited_items())
def test_appending_later_shortlisted_items_never_moves_an_earlier_plan(
    region: Region, items: list[PlanItem[str]], later: list[PlanItem[str]]
) -> None:
    _assert_appended_move_nothing(region, items, later)


@settings(max_examples=200, deadline=None)
@given(regions, _priced_items(), _priced_items())
def test_appending_later_priced_items_never_moves_an_earlier_plan(
    region: Region, items: list[PlanItem[str]], later: list[PlanItem[str]]
) -> None:
    _assert_appended_move_nothing(region, items, later)


@settings(max_examples=200, deadline=None)
@given(regions, _priced_items(max_size=10))
def test_no_instant_exceeds_capacity_with_priced_items(
    region: Region, items: list[PlanItem[str]]
) -> None:
    _assert_within_capacity(region, items)


# --- examples ---------------------------------------------------------------------------------


def _blocked_region() -> Region:
    """Capacity 4 of `a`; running work holds 2 of it until 10."""
    return Region({"a": 4, "b": 4, "c": 4}, (({"a": 2}, Window(0, 10)),))


def _one(item_id: str, amount: int, duration: int, *, deadline: int = 50) -> PlanItem[str]:
    return PlanItem(item_id, (PlanOption("site", {"a": amount}),), duration, 0, deadline)


def test_a_small_item_backfills_the_gap_before_a_blocked_big_one() -> None:
    big, short, long = _one("big", 4, 5), _one("short", 2, 10), _one("long", 2, 11)
    results = plan(_blocked_region().calendar(), [big, short, long])
    assert results == [
        Planned("big", 0, Window(10, 15), starts_now=False),
        Planned("short", 0, Window(0, 10), starts_now=True),
        Planned("long", 0, Window(15, 26), starts_now=False),
    ]


def test_the_earliest_option_wins_and_ties_go_to_the_earlier_option() -> None:
    options = (
        PlanOption("busy", {"a": 3}),
        PlanOption("free", {"b": 3}),
        PlanOption("also-free", {"c": 3}),
    )
    results = plan(_blocked_region().calendar(), [PlanItem("r", options, 5, 0, 50)])
    assert results == [Planned("r", 1, Window(0, 5), starts_now=True)]


def test_an_item_not_before_a_later_time_does_not_start_now() -> None:
    item = PlanItem("r", (PlanOption("site", {"b": 1}),), 5, not_before=3, deadline=10)
    assert plan(_blocked_region().calendar(), [item]) == [
        Planned("r", 0, Window(3, 8), starts_now=False)
    ]


def test_an_option_waits_for_its_nodes_whatever_the_totals_and_the_other_wins_meanwhile() -> None:
    """The busy site's nodes free at 20: its option starts then, though its totals hold it
    now, and an option elsewhere that starts earlier wins; a timed option's first part waits
    for the nodes too (the compute is held from the staging's start)."""
    calendar = Calendar({"a": 4, "b": 4}, now=0)
    calendar.take({"b": 4}, Window(0, 12))
    waits = PlanOption("nodes", {"a": 1}, nodes_free_at=20)
    alone = PlanItem("alone", (waits,), 5, 0, 50)
    assert plan(calendar.copy(), [alone]) == [Planned("alone", 0, Window(20, 25), False)]
    both = PlanItem("both", (waits, PlanOption("other", {"b": 1})), 5, 0, 50)
    assert plan(calendar.copy(), [both]) == [Planned("both", 1, Window(12, 17), False)]
    staged = TimedDemand([Part("b", 1, -10, 10), Part("a", 1, -10, 15)])
    timed = PlanOption("nodes", {"a": 1, "b": 1}, timed=staged, nodes_free_at=20)
    [planned] = plan(calendar.copy(), [PlanItem("staged", (timed,), 5, 0, 50)])
    assert planned == Planned("staged", 0, Window(30, 35), starts_now=False)
    too_late = PlanItem("late", (waits,), 5, 0, 19)
    [none] = plan(calendar.copy(), [too_late])
    assert isinstance(none, NoStart) and none.cause == "deadline", none


class _OneSiteNodes:
    """The nodes of the one site of label "nodes": four of 8 A100, five of each node's taken
    until 10, 20, 30 and 40; each item's gang by its id."""

    def __init__(self, gangs: Mapping[str, Gang]) -> None:
        a100 = Pool(name="a100", count=4, cpu_m=64_000, mem_mib=65_536, model="A100", devices=8)
        takes = [(10 * (n + 1), NodeTake(0, n, 5, -1, 0, 0, 0)) for n in range(4)]
        self.site = SiteNodes([a100], takes)
        self.gangs = gangs

    def free_from(self, item_id: str, label: str, start: int, duration: int) -> int | None:
        gang = self.gangs[item_id]
        return self.site.free_from(gang, start, duration, now=0) if label == "nodes" else start

    def take(self, item_id: str, label: str, window: Window) -> None:
        if label == "nodes":
            self.site.book(self.gangs[item_id], window.start, window.end, now=0)


def test_gangs_waiting_for_nodes_are_planned_around_those_before_them() -> None:
    """The site's totals (32 A100, 20 taken) hold each gang now; its nodes hold the first
    one-node gang of 8 at 10, the second at 20 (not at 10 too), and a short gang of 3 now,
    beside them; the other site wins a gang once it starts earlier there."""
    calendar = Calendar({"a": 32, "b": 8}, now=0)
    for node in range(4):
        calendar.take({"a": 5}, Window(0, 10 * (node + 1)))
    calendar.take({"b": 8}, Window(0, 25))
    whole = Gang(nodes=1, cpu_m=1000, mem_mib=1024, model="A100", devices=8)
    small = replace(whole, devices=3)
    nodes = _OneSiteNodes({"first": whole, "second": whole, "third": whole, "small": small})
    on_nodes = PlanOption("nodes", {"a": 8})
    items = [
        PlanItem("first", (on_nodes,), 100, 0, 500),
        PlanItem("second", (on_nodes,), 100, 0, 500),
        PlanItem("third", (on_nodes, PlanOption("other", {"b": 8})), 100, 0, 500),
        PlanItem("small", (replace(on_nodes, demand={"a": 3}),), 5, 0, 500),
    ]
    assert plan(calendar, items, nodes) == [
        Planned("first", 0, Window(10, 110), starts_now=False),
        Planned("second", 0, Window(20, 120), starts_now=False),
        Planned("third", 1, Window(25, 125), starts_now=False),
        Planned("small", 0, Window(0, 5), starts_now=True),
    ]


def test_an_item_whose_deadline_passes_before_it_fits_gets_no_start_and_the_reason() -> None:
    results = plan(_blocked_region().calendar(), [_one("big", 4, 5, deadline=9)])
    assert results == [
        NoStart("big", "deadline", "no start by its deadline 9 on any of its 1 options"),
    ]


def test_an_item_with_no_start_holds_nothing() -> None:
    calendar = _blocked_region().calendar()
    results = plan(calendar, [_one("big", 4, 5, deadline=9), _one("next", 2, 20)])
    assert results[1] == Planned("next", 0, Window(0, 20), starts_now=True)


def test_other_reasons_of_no_start() -> None:
    calendar = _blocked_region().calendar()
    calendar.advance(5)
    expired = PlanItem("late", (PlanOption("site", {"a": 1}),), 5, not_before=0, deadline=4)
    too_big = _one("huge", 5, 1)
    nothing: PlanItem[str] = PlanItem("none", (), 5, 0, 50)
    assert plan(calendar, [expired, too_big, nothing]) == [
        NoStart("late", "expired", "its deadline 4 is before its earliest start 5"),
        NoStart(
            "huge",
            "never_fits",
            "none of its 1 options ever fits (site: wants 5 of 'a', capacity 4)",
        ),
        NoStart("none", "no_options", "it has no options (no candidate site)"),
    ]


def test_an_option_naming_an_unknown_resource_raises() -> None:
    item = PlanItem("r", (PlanOption("site", {"z": 1}),), 5, 0, 50)
    with pytest.raises(UnknownResource):
        plan(_blocked_region().calendar(), [item])


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("id", ("", (), 5, 0, 5)),
        ("duration", ("r", (), 0, 0, 5)),
        ("not_before", ("r", (), 5, 1.5, 5)),
        ("deadline", ("r", (), 5, 0, True)),
        ("sites", ("r", (), 5, 0, 5, 0)),
        ("sites", ("r", (), 5, 0, 5, 2.0)),
    ],
)
def test_bad_items_are_invalid(field: str, values: tuple[object, ...]) -> None:
    with pytest.raises(Invalid) as caught:
        PlanItem(*values)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_an_option_with_timed_parts_starts_once_its_first_part_fits_and_starts_now_with_it() -> (
    None
):
    """Its staging holds the link over [start - 100, start), its compute from then on; a
    later item on the link goes after the staging, not after the run."""
    calendar = Calendar({"link": 10, "cpu": 4}, now=0)
    staged = TimedDemand([Part("link", 10, -100, 100), Part("cpu", 4, -100, 1100)])
    first = PlanItem(
        "staged",
        (PlanOption("site", {"link": 10, "cpu": 4}, timed=staged),),
        duration=1000,
        not_before=0,
        deadline=0,
    )
    second = PlanItem("after", (PlanOption("site", {"link": 10}),), 50, 0, 500)
    one, two = plan(calendar, [first, second])
    assert one == Planned("staged", 0, Window(100, 1100), starts_now=True)
    assert two == Planned("after", 0, Window(100, 150), starts_now=False)
    # Its first part must begin by the deadline (the cpu is free from 1100 on).
    for deadline, planned in ((1099, False), (1100, True)):
        late = PlanItem(
            "late",
            (PlanOption("site", {"link": 10, "cpu": 4}, timed=staged),),
            duration=1000,
            not_before=0,
            deadline=deadline,
        )
        [three] = plan(calendar.copy(), [late])
        assert isinstance(three, Planned) is planned, three
        if planned:
            assert three == Planned("late", 0, Window(1200, 2200), starts_now=False)


def _two_sites(objectives: tuple[float | None, float | None]) -> PlanItem[str]:
    """Two options of 2 of `a1` or 2 of `a2` for 100 s, priced with `objectives`."""
    options = []
    for key, objective in zip(("a1", "a2"), objectives, strict=True):
        timed = TimedDemand([Part(key, 2, 0, 100)]) if objective is not None else None
        compute = frozenset({key})
        options.append(PlanOption(key, {key: 2}, timed=timed, objective=objective, compute=compute))
    return PlanItem("job", tuple(options), duration=100, not_before=0, deadline=1000)


def test_a_priced_item_goes_where_its_resources_are_not_nearly_full() -> None:
    """`a1` is 8 of 10 held until 100, `a2` is free: both start now, the earliest-start rule
    takes the first, the scarcity rule the one its take leaves less loaded."""
    region = Region({"a1": 10, "a2": 10}, (({"a1": 8}, Window(0, 100)),))
    [unpriced] = plan(region.calendar(), [_two_sites((None, None))])
    assert unpriced == Planned("job", 0, Window(0, 100), starts_now=True)
    [priced] = plan(region.calendar(), [_two_sites((1.0, 1.0))])
    assert priced == Planned("job", 1, Window(0, 100), starts_now=True)
    # Filled to the brim, `a1` costs the job's whole share (1); `a2` at 2/10 (64^0.2 - 1) / 63.
    calendar = region.calendar()
    item = _two_sites((1.0, 1.0))
    prices = [
        congestion.price(calendar, o.timed, o.compute, 0, duration=100)  # type: ignore[arg-type]
        for o in item.options
    ]
    assert prices == pytest.approx([1.0, (64**0.2 - 1) / 63])
    # A much better objective outweighs the load. Waiting costs one per run time: with `a2`
    # full until 150, `a1` now (2) beats `a2` at 150 (1 + 0.02 + 1.5), unless `a2`'s
    # objective is better by more than the difference.
    [better] = plan(region.calendar(), [_two_sites((0.0, 1.5))])
    assert better.option == 0  # type: ignore[union-attr]
    busy = Region({"a1": 10, "a2": 10}, (({"a1": 8}, Window(0, 100)), ({"a2": 10}, Window(0, 150))))
    [waiting] = plan(busy.calendar(), [_two_sites((1.0, 1.0))])
    assert waiting == Planned("job", 0, Window(0, 100), starts_now=True)
    [soon] = plan(busy.calendar(), [_two_sites((1.0, 0.0))])
    assert soon == Planned("job", 1, Window(150, 250), starts_now=False)


def test_a_priced_item_with_no_start_is_chosen_nowhere() -> None:
    never = Calendar({"a1": 1, "a2": 1}, now=0)
    assert choose(never, _two_sites((1.0, 1.0))) is None


def test_a_priced_item_is_planned_on_the_sites_whose_compute_is_free() -> None:
    """Three sites, the item planned on one: `a1` (the best objective) is full until 1000, past
    its deadline; `a2` and `a3` are free, `a3` with the better objective. The shortlist keeps
    `a3`; the full site goes last, and fills the list only when no other site is left."""
    region = Region({"a1": 10, "a2": 10, "a3": 10}, (({"a1": 10}, Window(0, 1000)),))
    options = []
    for key, objective in (("a1", 0.0), ("a2", 0.8), ("a3", 0.5)):
        timed = TimedDemand([Part(key, 2, 0, 100)])
        options.append(
            PlanOption(key, {key: 2}, timed=timed, objective=objective, compute=frozenset({key}))
        )
    item = PlanItem("job", tuple(options), duration=100, not_before=0, deadline=500, sites=1)
    calendar = region.calendar()
    assert shortlist(calendar, item, 0) == [2]
    assert shortlist(calendar, replace(item, sites=2), 0) == [1, 2]
    assert shortlist(calendar, replace(item, sites=3), 0) == [0, 1, 2]
    assert shortlist(calendar, replace(item, options=(options[0], options[1]), sites=1), 0) == [1]
    [planned] = plan(calendar, [item])
    assert planned == Planned("job", 2, Window(0, 100), starts_now=True)
