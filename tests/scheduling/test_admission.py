"""One admission round: the queue put in order, planned with backfill, sorted, and the victims
of preemption chosen for the stuck requests of a higher class."""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cnbrain.domain.errors import Invalid
from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.scheduling.admission import Preemption, Round, Waiting, admission_round
from cnbrain.scheduling.backfill import NoStart, Planned, PlanOption
from cnbrain.scheduling.classes import PriorityClass, PriorityClasses
from cnbrain.scheduling.cohorts import Cohort, TenantQuota
from cnbrain.scheduling.resources import Resources, link_dimension
from cnbrain.scheduling.work import QueuedWork, RunningWork

CLASSES = PriorityClasses(
    [
        PriorityClass("high", 100, False, 0),
        PriorityClass("normal", 10, True, 600),
        PriorityClass("protected", 5, False, 600),
        PriorityClass("low", 0, True, 3600),
    ],
    default="normal",
)
VALUE = {one.name: one.value for one in CLASSES}
PREEMPTIBLE = {one.name: one.preemptible for one in CLASSES}
SITES = ("s1", "s2")
CAPACITY = Resources.of(cpu_m=12)
"""The region's capacity: 6 cpu on each of the two sites."""


def key(site: str) -> str:
    return f"{site}:cpu"


def empty_calendar(now: int = 0) -> Calendar[str]:
    return Calendar({key(site): 6 for site in SITES}, now=now)


def waiting(
    id: str,
    *,
    cpu: int,
    cls: str = "normal",
    tenant: str = "t",
    at: float = 0,
    sites: Sequence[str] = ("s1",),
    duration: int = 10,
    deadline: int = 1_000,
) -> Waiting[str]:
    return Waiting(
        work=QueuedWork(id, tenant, cls, Resources.of(cpu_m=cpu), at),
        options=tuple(PlanOption(site, {key(site): cpu}) for site in sites),
        duration=duration,
        deadline=deadline,
    )


def running(
    id: str, *, cpu: int, cls: str, started_at: float = 0, site: str = "s1", tenant: str = "t"
) -> RunningWork:
    return RunningWork(
        id=id,
        tenant=tenant,
        class_value=VALUE[cls],
        preemptible=PREEMPTIBLE[cls],
        started_at=started_at,
        demand=Resources.of(cpu_m=cpu),
        site=site,
    )


def holding(works: Sequence[RunningWork], *, until: int = 100, now: int = 0) -> Calendar[str]:
    """A calendar on which every work of `works` holds its cpu on its site until `until`."""
    calendar = empty_calendar(now)
    for work in works:
        calendar.take({key(work.site): work.demand["cpu_m"]}, Window(now, until))
    return calendar


def nothing_free(site: str) -> Resources:
    return Resources()


def free_on(calendar: Calendar[str]) -> Callable[[str], Resources]:
    """What the calendar has free on each site at its now, as a resource vector."""

    def free(site: str) -> Resources:
        return Resources.of(cpu_m=calendar.profile(key(site)).free_at(calendar.now))

    return free


def outcome(result: Round, request_id: str) -> tuple[str, int | str]:
    """Where a request was sorted: ("admit" or "later", its start) or (its list, its cause)."""
    for name in ("admit", "later"):
        for planned in getattr(result, name):
            if planned.id == request_id:
                return name, planned.start
    for name in ("expired", "impossible", "stuck"):
        for no_start in getattr(result, name):
            if no_start.id == request_id:
                return name, no_start.cause
    raise AssertionError(f"{request_id} is in no list")


def ids(items: Sequence[Planned | NoStart]) -> list[str]:
    return [item.id for item in items]


# --- order -------------------------------------------------------------------------------------


def test_a_higher_class_is_admitted_before_an_older_lower_one_when_only_one_fits() -> None:
    queue = [waiting("old-low", cpu=6, cls="low", at=0), waiting("new-high", cpu=6, cls="high")]
    result = admission_round(empty_calendar(), queue, classes=CLASSES, capacity=CAPACITY)
    assert result.order == ["new-high", "old-low"]
    assert result.position == {"new-high": 0, "old-low": 1}
    assert [(p.id, p.start) for p in result.admit] == [("new-high", 0)]
    assert [(p.id, p.start) for p in result.later] == [("old-low", 10)]


@pytest.mark.parametrize(
    ("weights", "first"),
    [
        # a holds 4 of 12, b holds 2: b has the lower share and goes first.
        (None, "b-1"),
        # a's weight of 3 makes its share 4/12/3 = 1/9, below b's 2/12 = 1/6.
        ({"a": 3.0}, "a-1"),
    ],
)
def test_within_a_class_the_weighted_fair_share_decides_who_fits(
    weights: Mapping[str, float] | None, first: str
) -> None:
    work = [
        running("a-run", cpu=4, cls="normal", site="s2", tenant="a"),
        running("b-run", cpu=2, cls="normal", site="s2", tenant="b"),
    ]
    queue = [
        waiting("a-1", cpu=6, tenant="a", at=0),
        waiting("b-1", cpu=6, tenant="b", at=5),
    ]
    result = admission_round(
        holding(work), queue, classes=CLASSES, capacity=CAPACITY, running=work, weights=weights
    )
    second = ({"a-1", "b-1"} - {first}).pop()
    assert result.order == [first, second]
    assert ids(result.admit) == [first]
    assert [(p.id, p.start) for p in result.later] == [(second, 10)]


def test_a_small_request_backfills_a_gap_only_where_the_big_one_before_it_does_not_move() -> None:
    work = [running("run", cpu=2, cls="normal")]
    queue = [
        waiting("big", cpu=6, cls="high", duration=5),
        waiting("short", cpu=4, cls="low", duration=100, at=1),
        waiting("long", cpu=4, cls="low", duration=101, at=2),
    ]
    result = admission_round(holding(work), queue, classes=CLASSES, capacity=CAPACITY)
    # big waits for the running work to end at 100; short ends by then and starts now; long
    # would delay big, so it waits until big ends.
    assert result.order == ["big", "short", "long"]
    assert result.admit == [Planned("short", 0, Window(0, 100), starts_now=True)]
    assert result.later == [
        Planned("big", 0, Window(100, 105), starts_now=False),
        Planned("long", 0, Window(105, 206), starts_now=False),
    ]


def test_a_request_is_planned_on_the_option_that_starts_first() -> None:
    work = [running("run", cpu=6, cls="normal", site="s1")]
    queue = [waiting("r", cpu=3, sites=("s1", "s2"))]
    result = admission_round(holding(work), queue, classes=CLASSES, capacity=CAPACITY)
    assert result.admit == [Planned("r", 1, Window(0, 10), starts_now=True)]


def test_the_calendar_afterwards_holds_the_whole_plan() -> None:
    calendar = empty_calendar()
    queue = [waiting("now", cpu=4), waiting("later", cpu=4)]
    admission_round(calendar, queue, classes=CLASSES, capacity=CAPACITY)
    assert calendar.profile(key("s1")).steps() == ((0, 2), (20, 6))


# --- backfill never delays an earlier request ----------------------------------------------


FIRST_CLASSES = ("high", "normal")
"""The classes of the requests ranked first; the added ones are all `low`, ranked after."""


def _request(
    index: int,
    prefix: str,
    cls: str,
    tenant: str,
    options: list[tuple[str, int]],
    duration: int,
    wait: int,
) -> Waiting[str]:
    return Waiting(
        work=QueuedWork(
            f"{prefix}{index}",
            tenant,
            cls,
            Resources.of(cpu_m=max((c for _, c in options), default=0)),
            index,
        ),
        options=tuple(PlanOption(site, {key(site): cpu}) for site, cpu in options),
        duration=duration,
        deadline=wait,
    )


def _requests(prefix: str, classes: Sequence[str]) -> st.SearchStrategy[list[Waiting[str]]]:
    one = st.tuples(
        st.sampled_from(classes),
        st.sampled_from(["a", "b", "c"]),
        st.lists(st.tuples(st.sampled_from(SITES), st.integers(0, 7)), max_size=2),
        st.integers(1, 20),
        st.integers(-3, 40),
    )
    return st.lists(one, max_size=8).map(
        lambda specs: [_request(i, prefix, *spec) for i, spec in enumerate(specs)]
    )


running_work = st.lists(
    st.tuples(st.sampled_from(SITES), st.integers(1, 3), st.integers(1, 30)), max_size=4
)


def _calendar_with(held: Sequence[tuple[str, int, int]]) -> Calendar[str]:
    calendar = empty_calendar()
    for site, cpu, end in held:
        if calendar.fits({key(site): cpu}, Window(0, end)):
            calendar.take({key(site): cpu}, Window(0, end))
    return calendar


@settings(max_examples=200, deadline=None)
@given(running_work, _requests("r", FIRST_CLASSES), _requests("added", ("low",)))
def test_adding_later_ranked_requests_never_changes_the_plan_of_earlier_ones(
    held: list[tuple[str, int, int]], first: list[Waiting[str]], added: list[Waiting[str]]
) -> None:
    alone = admission_round(_calendar_with(held), first, classes=CLASSES, capacity=CAPACITY)
    together = admission_round(
        _calendar_with(held), first + added, classes=CLASSES, capacity=CAPACITY
    )
    assert together.order[: len(first)] == alone.order
    for request in first:
        request_id = request.work.id
        assert outcome(together, request_id) == outcome(alone, request_id)
    for name in ("admit", "later", "expired", "impossible", "stuck"):
        kept = [item for item in getattr(together, name) if not item.id.startswith("added")]
        assert kept == getattr(alone, name)


# --- sorting -----------------------------------------------------------------------------------


def test_expired_impossible_and_stuck_requests_are_sorted_apart() -> None:
    work = [running("run", cpu=6, cls="normal", site="s1")]
    calendar = holding(work, until=100, now=50)
    queue = [
        waiting("expired", cpu=1, deadline=49),
        waiting("no-options", cpu=1, sites=()),
        waiting("too-big", cpu=7, sites=("s1", "s2")),
        waiting("stuck", cpu=1, deadline=99),
        waiting("waits", cpu=1, deadline=100),
        waiting("now", cpu=1, sites=("s1", "s2")),
    ]
    result = admission_round(calendar, queue, classes=CLASSES, capacity=CAPACITY)
    assert ids(result.expired) == ["expired"]
    assert [(n.id, n.cause) for n in result.impossible] == [
        ("no-options", "no_options"),
        ("too-big", "never_fits"),
    ]
    assert [(n.id, n.cause) for n in result.stuck] == [("stuck", "deadline")]
    assert [(p.id, p.start) for p in result.later] == [("waits", 100)]
    assert [(p.id, p.start, p.option) for p in result.admit] == [("now", 50, 1)]
    assert result.preemptions == []


def test_a_request_queued_twice_or_of_an_unknown_class_is_invalid() -> None:
    twice = [waiting("r", cpu=1), waiting("r", cpu=2)]
    with pytest.raises(Invalid) as caught:
        admission_round(empty_calendar(), twice, classes=CLASSES, capacity=CAPACITY)
    assert caught.value.field == "queued[1].id"
    unknown = [waiting("r", cpu=1, cls="urgent")]
    with pytest.raises(Invalid) as caught:
        admission_round(empty_calendar(), unknown, classes=CLASSES, capacity=CAPACITY)
    assert caught.value.field == "priority_class"


# --- preemption --------------------------------------------------------------------------------


def _full_site() -> list[RunningWork]:
    """s1 full until 100: two low works (one older), one normal; s2 holds one low work."""
    return [
        running("low-old", cpu=2, cls="low", started_at=10),
        running("low-new", cpu=2, cls="low", started_at=50),
        running("normal", cpu=2, cls="normal", started_at=60),
        running("s2-low", cpu=6, cls="low", started_at=70, site="s2"),
    ]


def _round(
    work: Sequence[RunningWork],
    queue: Sequence[Waiting[str]],
    free_now: Callable[[str], Resources] | None = nothing_free,
) -> Round:
    calendar = holding(work)
    return admission_round(
        calendar, queue, classes=CLASSES, capacity=CAPACITY, running=work, free_now=free_now
    )


@pytest.mark.parametrize(
    ("cpu", "victims"),
    [
        (2, ("low-new",)),
        (4, ("low-new", "low-old")),
        (6, ("low-new", "low-old", "normal")),
    ],
)
def test_a_stuck_high_request_preempts_the_lowest_class_most_recent_first(
    cpu: int, victims: tuple[str, ...]
) -> None:
    result = _round(_full_site(), [waiting("urgent", cpu=cpu, cls="high", deadline=5)])
    assert ids(result.stuck) == ["urgent"]
    assert result.preemptions == [Preemption("urgent", "s1", victims)]


def test_what_is_free_now_is_not_preempted_for() -> None:
    def two_free(site: str) -> Resources:
        return Resources.of(cpu_m=2)

    result = _round(_full_site(), [waiting("urgent", cpu=4, cls="high", deadline=5)], two_free)
    assert result.preemptions == [Preemption("urgent", "s1", ("low-new",))]


def test_the_victims_are_on_the_site_of_an_option_the_first_that_can_free_it() -> None:
    work = _full_site()
    only_s2 = _round(work, [waiting("urgent", cpu=2, cls="high", deadline=5, sites=("s2",))])
    assert only_s2.preemptions == [Preemption("urgent", "s2", ("s2-low",))]
    s2_first = _round(work, [waiting("urgent", cpu=2, cls="high", deadline=5, sites=("s2", "s1"))])
    assert s2_first.preemptions == [Preemption("urgent", "s2", ("s2-low",))]
    s1_first = _round(work, [waiting("urgent", cpu=2, cls="high", deadline=5, sites=("s1", "s2"))])
    assert s1_first.preemptions == [Preemption("urgent", "s1", ("low-new",))]


def test_work_on_a_site_of_no_option_is_never_a_victim() -> None:
    work = [
        running("s1-low", cpu=6, cls="low"),
        running("s2-protected", cpu=6, cls="protected", site="s2"),
    ]
    result = _round(work, [waiting("urgent", cpu=2, cls="high", deadline=5, sites=("s2",))])
    assert ids(result.stuck) == ["urgent"]
    assert result.preemptions == []


def test_the_next_option_is_tried_when_the_first_site_cannot_free_enough() -> None:
    work = [
        running("s1-protected", cpu=6, cls="protected"),
        running("s2-low", cpu=6, cls="low", site="s2"),
    ]
    result = _round(work, [waiting("urgent", cpu=3, cls="high", deadline=5, sites=("s1", "s2"))])
    assert result.preemptions == [Preemption("urgent", "s2", ("s2-low",))]


def test_an_option_that_waits_for_nodes_gets_the_victims_that_free_them() -> None:
    """s1 has 2 cpu free now, all the urgent gang asks; its nodes free at 100 only, once
    `low-old` (on the node it needs) ends: that work is its victim, though the most recent
    low work would come first by the rule."""
    work = [
        running("low-old", cpu=2, cls="low", started_at=10),
        running("low-new", cpu=2, cls="low", started_at=50),
    ]
    calendar = holding(work)
    option = PlanOption("s1", {key("s1"): 2}, nodes_free_at=100)
    urgent = replace(waiting("urgent", cpu=2, cls="high", deadline=5), options=(option,))
    asked: list[tuple[str, str, frozenset[str]]] = []

    def nodes_freed(request_id: str, site: str, victims: frozenset[str]) -> bool:
        asked.append((request_id, site, victims))
        return "low-old" in victims

    result = admission_round(
        calendar,
        [urgent],
        classes=CLASSES,
        capacity=CAPACITY,
        running=work,
        free_now=free_on(calendar),
        nodes_freed=nodes_freed,
    )
    assert ids(result.stuck) == ["urgent"]
    assert result.preemptions == [Preemption("urgent", "s1", ("low-old",))]
    assert asked[0] == ("urgent", "s1", frozenset())
    # Without a way to tell, its totals lack nothing: no victim.
    blind = admission_round(
        holding(work),
        [urgent],
        classes=CLASSES,
        capacity=CAPACITY,
        running=work,
        free_now=free_on(calendar),
    )
    assert ids(blind.stuck) == ["urgent"] and blind.preemptions == []


def test_never_same_class_higher_class_or_non_preemptible_work() -> None:
    work = [
        running("peer", cpu=2, cls="normal"),
        running("protected", cpu=2, cls="protected"),
        running("higher", cpu=2, cls="high"),
    ]
    result = _round(work, [waiting("stuck", cpu=2, cls="normal", deadline=5)])
    assert ids(result.stuck) == ["stuck"]
    assert result.preemptions == []
    # The same work gives way to nothing a lower class asks either.
    low = _round(work, [waiting("stuck-low", cpu=2, cls="low", deadline=5)])
    assert low.preemptions == []


def test_a_victim_is_given_to_one_preemptor_only() -> None:
    work = [
        running("low-a", cpu=3, cls="low", started_at=10),
        running("low-b", cpu=3, cls="low", started_at=20),
    ]
    queue = [
        waiting("first", cpu=3, cls="high", deadline=5, at=0),
        waiting("second", cpu=3, cls="high", deadline=5, at=1),
        waiting("third", cpu=3, cls="high", deadline=5, at=2),
    ]
    result = _round(work, queue)
    assert ids(result.stuck) == ["first", "second", "third"]
    assert result.preemptions == [
        Preemption("first", "s1", ("low-b",)),
        Preemption("second", "s1", ("low-a",)),
    ]


def test_what_one_preemption_frees_beyond_its_need_counts_for_the_next() -> None:
    work = [
        running("low-big", cpu=4, cls="low", started_at=50),
        running("low-small", cpu=2, cls="low", started_at=10),
    ]
    queue = [
        waiting("first", cpu=2, cls="high", deadline=5, at=0),
        waiting("second", cpu=3, cls="high", deadline=5, at=1),
        waiting("third", cpu=1, cls="high", deadline=5, at=2),
    ]
    result = _round(work, queue)
    # low-big frees 4: 2 for first, 2 left towards second's 3, so low-small covers the rest;
    # nothing is left for third.
    assert result.preemptions == [
        Preemption("first", "s1", ("low-big",)),
        Preemption("second", "s1", ("low-small",)),
    ]


def test_a_preemptor_served_by_what_is_already_freed_takes_no_victim() -> None:
    work = [running("low-big", cpu=6, cls="low")]
    queue = [
        waiting("first", cpu=3, cls="high", deadline=5, at=0),
        waiting("second", cpu=3, cls="high", deadline=5, at=1),
    ]
    result = _round(work, queue)
    assert result.preemptions == [Preemption("first", "s1", ("low-big",))]


def test_room_already_freed_is_counted_once_for_the_preemptors_it_covers() -> None:
    work = [
        running("low-big", cpu=5, cls="low", started_at=50),
        running("low-one", cpu=1, cls="low", started_at=10),
    ]
    queue = [
        waiting("a", cpu=2, cls="high", deadline=5, at=0),
        waiting("b", cpu=3, cls="high", deadline=5, at=1),
        waiting("c", cpu=1, cls="high", deadline=5, at=2),
    ]
    result = _round(work, queue)
    # low-big frees 5: 2 for a and 3 for b; c needs what low-one holds.
    assert result.preemptions == [
        Preemption("a", "s1", ("low-big",)),
        Preemption("c", "s1", ("low-one",)),
    ]


def test_without_free_now_or_running_work_nothing_is_preempted() -> None:
    work = _full_site()
    queue = [waiting("urgent", cpu=2, cls="high", deadline=5)]
    assert _round(work, queue, free_now=None).preemptions == []
    calendar = holding(work)
    no_running = admission_round(
        calendar, queue, classes=CLASSES, capacity=CAPACITY, free_now=free_on(calendar)
    )
    assert ids(no_running.stuck) == ["urgent"]
    assert no_running.preemptions == []


def test_free_now_read_from_the_calendar_gives_the_same_victims() -> None:
    work = _full_site()
    calendar = holding(work)
    result = admission_round(
        calendar,
        [waiting("urgent", cpu=2, cls="high", deadline=5)],
        classes=CLASSES,
        capacity=CAPACITY,
        running=work,
        free_now=free_on(calendar),
    )
    assert result.preemptions == [Preemption("urgent", "s1", ("low-new",))]


def test_only_stuck_requests_preempt() -> None:
    work = _full_site()
    queue = [
        waiting("waits", cpu=2, cls="high", deadline=100),
        waiting("expired", cpu=2, cls="high", deadline=-1),
    ]
    result = _round(work, queue)
    assert [(p.id, p.start) for p in result.later] == [("waits", 100)]
    assert ids(result.expired) == ["expired"]
    assert result.preemptions == []


def test_a_round_gives_victims_to_at_most_max_preemptors_requests_first_in_order() -> None:
    work = [running(f"low-{i}", cpu=1, cls="low", started_at=i) for i in range(6)]
    queue = [waiting(f"urgent-{i}", cpu=1, cls="high", deadline=5, at=i) for i in range(4)]
    calendar = holding(work)
    result = admission_round(
        calendar,
        queue,
        classes=CLASSES,
        capacity=CAPACITY,
        running=work,
        free_now=nothing_free,
        max_preemptors=2,
    )
    assert [p.preemptor for p in result.preemptions] == ["urgent-0", "urgent-1"]
    assert all(len(p.victims) == 1 for p in result.preemptions)


# --- preemption for the links of a path --------------------------------------------------------

LINK = "L"
"""One link of 10 Mbps on the path to every site, in the tests below."""


def _link_calendar(work: Sequence[RunningWork], *, until: int = 100) -> Calendar[str]:
    """s1 and s2 with 6 cpu each and link L of 10 Mbps; every work of `work` holds its cpu
    on its site and its bandwidth on L until `until`."""
    calendar = Calendar({key("s1"): 6, key("s2"): 6, LINK: 10}, now=0)
    for one in work:
        demand = {key(one.site): one.demand["cpu_m"]}
        if one.bandwidth[link_dimension(LINK)]:
            demand[LINK] = one.bandwidth[link_dimension(LINK)]
        calendar.take(demand, Window(0, until))
    return calendar


def _on_link(
    id: str, *, cpu: int, mbps: int, cls: str, started_at: float = 0, site: str = "s1"
) -> RunningWork:
    return RunningWork(
        id=id,
        tenant="t",
        class_value=VALUE[cls],
        preemptible=PREEMPTIBLE[cls],
        started_at=started_at,
        demand=Resources.of(cpu_m=cpu),
        site=site,
        bandwidth=Resources.bandwidth({LINK: mbps} if mbps else {}),
    )


def _waiting_on_link(
    id: str, *, cpu: int, mbps: int, cls: str, sites: Sequence[str] = ("s1",), at: float = 0
) -> Waiting[str]:
    return Waiting(
        work=QueuedWork(id, "t", cls, Resources.of(cpu_m=cpu), at),
        options=tuple(
            PlanOption(site, {key(site): cpu, LINK: mbps}, Resources.bandwidth({LINK: mbps}))
            for site in sites
        ),
        duration=10,
        deadline=5,
    )


def _link_round(
    work: Sequence[RunningWork], queue: Sequence[Waiting[str]], *, links_count: bool = True
) -> Round:
    calendar = _link_calendar(work)

    def free_link(link_id: str) -> int:
        return calendar.profile(link_id).free_at(calendar.now)

    return admission_round(
        calendar,
        queue,
        classes=CLASSES,
        capacity=CAPACITY,
        running=work,
        free_now=free_on(calendar),
        free_bandwidth_now=free_link if links_count else None,
    )


def _link_holders() -> list[RunningWork]:
    """L is full: 6 Mbps held by low work on s2, 4 by normal work on s2. s1 has 4 cpu free,
    2 held by low work that holds no bandwidth."""
    return [
        _on_link("s2-low", cpu=1, mbps=6, cls="low", started_at=50, site="s2"),
        _on_link("s2-normal", cpu=1, mbps=4, cls="normal", started_at=60, site="s2"),
        _on_link("s1-low", cpu=2, mbps=0, cls="low", started_at=90),
    ]


def test_a_request_stuck_only_on_a_link_preempts_the_holder_of_it_on_another_site() -> None:
    work = _link_holders()
    result = _link_round(work, [_waiting_on_link("urgent", cpu=2, mbps=5, cls="high")])
    assert ids(result.stuck) == ["urgent"]
    # s1 has the cpu: only the link lacks, and the lowest class holding it runs on s2; s1-low,
    # the most recent low work, frees nothing the option lacks.
    assert result.preemptions == [Preemption("urgent", "s1", ("s2-low",))]
    both = _link_round(work, [_waiting_on_link("urgent", cpu=2, mbps=8, cls="high")])
    assert both.preemptions == [Preemption("urgent", "s1", ("s2-low", "s2-normal"))]
    # Without the links' free bandwidth, the option lacks nothing it counts: no victim.
    blind = _link_round(
        work, [_waiting_on_link("urgent", cpu=2, mbps=5, cls="high")], links_count=False
    )
    assert ids(blind.stuck) == ["urgent"] and blind.preemptions == []


def test_a_link_is_never_freed_by_a_same_class_holder() -> None:
    work = _link_holders()
    fits = _link_round(work, [_waiting_on_link("stuck", cpu=2, mbps=5, cls="normal")])
    assert fits.preemptions == [Preemption("stuck", "s1", ("s2-low",))]
    # 8 Mbps needs s2-normal too: a peer of the class normal, never a victim.
    peer = _link_round(work, [_waiting_on_link("stuck", cpu=2, mbps=8, cls="normal")])
    assert ids(peer.stuck) == ["stuck"] and peer.preemptions == []


def test_a_need_of_compute_and_a_link_takes_victims_for_both() -> None:
    work = [
        _on_link("s1-low-cpu", cpu=6, mbps=0, cls="low", started_at=80),
        _on_link("s2-low-link", cpu=1, mbps=10, cls="low", started_at=70, site="s2"),
    ]
    result = _link_round(work, [_waiting_on_link("urgent", cpu=3, mbps=2, cls="high")])
    assert result.preemptions == [Preemption("urgent", "s1", ("s1-low-cpu", "s2-low-link"))]
    # On s2 the link holder frees both its cpu and the link: one victim.
    on_s2 = _link_round(
        work, [_waiting_on_link("urgent", cpu=3, mbps=2, cls="high", sites=("s2",))]
    )
    assert on_s2.preemptions == [Preemption("urgent", "s2", ("s2-low-link",))]


def test_bandwidth_one_preemption_frees_beyond_its_ask_counts_for_the_next() -> None:
    work = [_on_link("s2-low", cpu=1, mbps=10, cls="low", site="s2")]
    queue = [
        _waiting_on_link("first", cpu=1, mbps=4, cls="high", at=0),
        _waiting_on_link("second", cpu=1, mbps=6, cls="high", at=1),
        _waiting_on_link("third", cpu=1, mbps=1, cls="high", at=2),
    ]
    result = _link_round(work, queue)
    # s2-low frees 10 Mbps: 4 for first, 6 for second, none left for third (and no victim).
    assert ids(result.stuck) == ["first", "second", "third"]
    assert result.preemptions == [Preemption("first", "s1", ("s2-low",))]


def _cohort(**quotas: tuple[int, int]) -> dict[str, Cohort]:
    """Every tenant named in one cohort, each with (nominal, borrowing limit) cpu."""
    cohort = Cohort(
        "pool",
        {
            tenant: TenantQuota(Resources.of(cpu_m=nominal), Resources.of(cpu_m=limit))
            for tenant, (nominal, limit) in quotas.items()
        },
    )
    return dict.fromkeys(quotas, cohort)


def test_a_request_its_cohort_refuses_waits_over_quota_with_the_reason() -> None:
    queue = [
        waiting("first", cpu=2, tenant="a", at=0),
        waiting("second", cpu=2, tenant="a", at=1),
    ]
    result = admission_round(
        empty_calendar(),
        queue,
        classes=CLASSES,
        capacity=CAPACITY,
        cohort_of=_cohort(a=(2, 0), b=(4, 0)),
    )
    assert ids(result.admit) == ["first"]
    [over] = result.over_quota
    assert over.id == "second"
    assert over.reason == (
        "cpu_m: tenant 'a' would hold 4, 2 beyond its nominal 2, but may borrow at most 0"
    )


def test_what_a_tenant_holds_elsewhere_counts_against_its_cohort_and_its_fair_share() -> None:
    queue = [waiting("mine", cpu=2, tenant="a", at=0), waiting("theirs", cpu=2, tenant="b", at=1)]
    cohorts = _cohort(a=(4, 0), b=(4, 0))
    alone = admission_round(
        empty_calendar(), queue, classes=CLASSES, capacity=CAPACITY, cohort_of=cohorts
    )
    assert ids(alone.admit) == ["mine", "theirs"]
    # Tenant a's cross-region requests hold 3 of its nominal 4 in other regions.
    held = admission_round(
        empty_calendar(),
        queue,
        classes=CLASSES,
        capacity=CAPACITY,
        cohort_of=cohorts,
        elsewhere={"a": Resources.of(cpu_m=3)},
    )
    assert held.order == ["theirs", "mine"]  # a's dominant share is the larger one
    assert ids(held.admit) == ["theirs"]
    [over] = held.over_quota
    assert over.id == "mine"
    assert over.reason == (
        "cpu_m: tenant 'a' would hold 5, 1 beyond its nominal 4, but may borrow at most 0"
    )


def test_a_tenant_borrows_what_its_cohort_leaves_unused_up_to_its_limit() -> None:
    queue = [waiting(f"r{i}", cpu=2, tenant="a", at=i) for i in range(3)]
    result = admission_round(
        empty_calendar(),
        queue,
        classes=CLASSES,
        capacity=CAPACITY,
        cohort_of=_cohort(a=(2, 2), b=(4, 0)),
    )
    assert ids(result.admit) == ["r0", "r1"]
    assert [o.id for o in result.over_quota] == ["r2"]


def test_a_lender_reclaims_borrowed_work_first_whatever_its_class() -> None:
    # b holds 6 on s1, 4 beyond its nominal 2, in work of a class that is never preempted.
    work = [
        running("b-protected", cpu=4, cls="protected", tenant="b", started_at=5),
        running("b-high", cpu=2, cls="high", tenant="b", started_at=1),
    ]
    queue = [waiting("a-needs", cpu=4, cls="low", tenant="a", deadline=5)]
    cohorts = _cohort(a=(4, 0), b=(2, 4))
    result = admission_round(
        holding(work),
        queue,
        classes=CLASSES,
        capacity=CAPACITY,
        running=work,
        free_now=nothing_free,
        cohort_of=cohorts,
    )
    assert ids(result.stuck) == ["a-needs"]
    assert result.preemptions == [Preemption("a-needs", "s1", ("b-protected",))]
    # Without the cohort, a low request preempts nothing.
    alone = admission_round(
        holding(work),
        queue,
        classes=CLASSES,
        capacity=CAPACITY,
        running=work,
        free_now=nothing_free,
    )
    assert alone.preemptions == []


def test_a_tenant_beyond_its_nominal_reclaims_nothing() -> None:
    work = [running("b-low", cpu=6, cls="low", tenant="b")]
    queue = [waiting("a-big", cpu=6, cls="low", tenant="a", deadline=5)]
    result = admission_round(
        holding(work),
        queue,
        classes=CLASSES,
        capacity=CAPACITY,
        running=work,
        free_now=nothing_free,
        cohort_of=_cohort(a=(4, 4), b=(2, 4)),
    )
    assert result.preemptions == []


def test_a_member_with_work_waiting_for_its_nominal_lends_none_of_it() -> None:
    queue = [
        waiting("a-1", cpu=2, tenant="a", at=0),
        waiting("a-2", cpu=2, tenant="a", at=1),
        waiting("b-1", cpu=4, tenant="b", at=5),
    ]
    result = admission_round(
        empty_calendar(),
        queue,
        classes=CLASSES,
        capacity=CAPACITY,
        cohort_of=_cohort(a=(2, 4), b=(4, 0)),
    )
    assert ids(result.admit) == ["a-1", "b-1"]
    [over] = result.over_quota
    assert over.id == "a-2"
    assert over.reason.endswith("but the cohort's other members leave 0 unused")
    # Without b's request, a borrows b's idle quota.
    alone = admission_round(
        empty_calendar(),
        queue[:2],
        classes=CLASSES,
        capacity=CAPACITY,
        cohort_of=_cohort(a=(2, 4), b=(4, 0)),
    )
    assert ids(alone.admit) == ["a-1", "a-2"]
