"""Admission planning over the calendar: conservative backfill.

The planner takes a `Calendar` of a region's resources, already holding the windows of its
running and admitted work, and the queued work in rank order (as `fair_share.fair_order`
gives it). Each item has a few options, best first; an option is one way to serve it (a
candidate site) as a demand over calendar keys (the site's compute and the links of its path
at the item's bandwidth). Items are planned one after another, in rank order:

1. for every option, the earliest start `s` with `not_before <= s <= deadline` at which its
   demand fits for the item's whole duration (`Calendar.earliest`);
2. the option of the earliest start wins; between options of equal start, the earlier one.
   An item whose options are all priced (`PlanOption.objective`: a job's flows with their
   site's objective) is chosen instead by the `scarcity` rule (`congestion.score`): the
   lowest objective plus congestion price plus delay past the earliest start of any option,
   ties to the earlier start, then the earlier option (`choose`), among the options of its
   `PlanItem.sites` sites whose compute alone scores best on the calendar as it is
   (`shortlist`), so that its candidates follow the load;
3. its window `[start, start + duration)` is taken on the calendar, a reservation in the
   plan, so that every later item plans around it; with a `NodeBook`, its gang is booked on
   the nodes of its site over that window too, and a start found on the calendar holds
   only where the option's nodes hold its gang for the whole window (else the search goes
   on from where they do);
4. an item with no start within its deadline on any option holds nothing and gets the reason.

The contract, conservative backfill: an item's planned start depends on the calendar and on
the items ranked before it only, never on those after it. So appending items never moves the
planned start of an earlier one, and a later item takes a gap (starts before an earlier one
that is blocked) only where it does not delay it: a big job waiting for room is not starved
by a stream of small ones. An item is never planned over capacity: the calendar refuses it.

Starting a planned item now is admission: an item whose planned start is the calendar's `now`
may start at once (`Planned.starts_now`); the others wait with their planned start as the
estimated start, and are planned again, from scratch, in the next cycle.

Cost: per item, one `Calendar.earliest` per option tried (its leapfrog over the option's
resources) and one `Calendar.take`. Options after the first are searched only up to one second
before the best start found so far (a later start would lose), and not at all once an option
starts at `not_before`. A priced item with more sites than `PlanItem.sites` first scores each
site's compute (one search and one price a site); it searches each option of the sites kept
up to the start where it could no longer win, and prices each start found over its parts'
windows. The calendar scans only the steps of resources that may be short, and a resource
searched before for the same amount and duration from where the last search found no
earlier start (`Profile`). Pure: no I/O, no clock; the only state changed is the calendar
given.
"""

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, Protocol, TypeVar

from cnbrain.domain.errors import Invalid
from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.ledger.timed_demand import TimedDemand
from cnbrain.scheduling import congestion
from cnbrain.scheduling.checks import checked_name
from cnbrain.scheduling.resources import Resources

K = TypeVar("K", bound=Hashable)


def _checked_time(value: object, field: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid("must be an integer number of seconds", field=field)
    if minimum is not None and value < minimum:
        raise Invalid(f"must be at least {minimum}", field=field)
    return value


@dataclass(frozen=True, slots=True)
class PlanOption(Generic[K]):
    """One way to serve an item: `label` names it (e.g. the site), `demand` is what it holds
    over its window, an amount per calendar key (its keys must be in the calendar).
    `bandwidth` is what it asks of the links of its path, in Mbps over link dimensions
    (`Resources.bandwidth`): the amounts `demand` holds on the links' keys, named so that
    preemption can tell what the option lacks of each link (none: it asks no bandwidth, or
    its links do not count for preemption). The planner does not read it.

    `timed`, when given, is what the option holds over windows of their own around its
    start (a job's flows: `ledger.timed_demand`), and `demand` the most it holds of each key
    at once. Its start is its compute's start, `lead` seconds after its first part begins:
    the option may start no earlier than `now + lead`, its first part must begin by the
    item's deadline, and it starts now (`Planned.starts_now`) when its first part does.

    `objective`, on an option with `timed`, prices it: it is the engine's objective of its
    site (lower is better), and `compute` the keys of its compute (the share the congestion
    price is read against). An item whose options are all priced is chosen by the `scarcity`
    rule (module docstring).

    `nodes_free_at` is the epoch second from which the option's compute may be taken, what
    the calendar's totals say aside: when the nodes of a site with node pools that a gang
    needs free (`ledger.node_starts`); its first part begins no earlier."""

    label: str
    demand: Mapping[K, int]
    bandwidth: Resources = field(default_factory=Resources)
    timed: TimedDemand[K] | None = None
    objective: float | None = None
    compute: frozenset[K] = field(default_factory=frozenset)
    nodes_free_at: int = 0

    @property
    def priced(self) -> bool:
        """Whether the `scarcity` rule can price it: it has `timed` and `objective`."""
        return self.timed is not None and self.objective is not None


class NodeBook(Protocol):
    """The nodes of the sites a plan's gangs go to, which the calendar's totals do not see:
    a gang planned on a site is booked there (`take`), and the gangs after it start only
    where its nodes hold them around what is booked (`free_from`)."""

    def free_from(self, item_id: str, label: str, start: int, duration: int) -> int | None:
        """The earliest epoch second from `start` at which the nodes of option `label` hold
        item `item_id`'s gang for `duration` seconds (`start` when the option has no nodes
        to wait for); None when they never do."""
        ...

    def take(self, item_id: str, label: str, window: Window) -> None:
        """Book item `item_id`'s gang on the nodes of option `label` over `window`."""
        ...


@dataclass(frozen=True, slots=True)
class PlanItem(Generic[K]):
    """A queued request to plan: its `options`, best first; its `duration` in seconds (at
    least 1); the earliest start it may have (`not_before`, usually now) and the latest
    (`deadline`: its submission time plus its max wait). A priced item is planned on the
    options of at most `sites` of its sites (labels), those whose compute alone scores best
    on the calendar as it is (`shortlist`; None: all of them). Raises `Invalid` naming the
    field."""

    id: str
    options: tuple[PlanOption[K], ...]
    duration: int
    not_before: int
    deadline: int
    sites: int | None = None

    def __post_init__(self) -> None:
        checked_name(self.id, field="id")
        _checked_time(self.duration, "duration", minimum=1)
        _checked_time(self.not_before, "not_before")
        _checked_time(self.deadline, "deadline")
        if self.sites is not None:
            _checked_time(self.sites, "sites", minimum=1)


@dataclass(frozen=True, slots=True)
class Planned:
    """Item `id` is planned on its option number `option` over `window`; `starts_now` when
    the window starts at the calendar's now, that is, when it may be admitted now."""

    id: str
    option: int
    window: Window
    starts_now: bool

    @property
    def start(self) -> int:
        return self.window.start


NoStartCause = Literal["expired", "no_options", "never_fits", "deadline"]
"""Why an item has no start: its deadline is before it may start (`expired`); it has no
option (`no_options`); none of its options ever fits the capacity (`never_fits`); none fits
by its deadline (`deadline`)."""


@dataclass(frozen=True, slots=True)
class NoStart:
    """Item `id` has no start within its deadline on any option, for `cause`, which `reason`
    says with the amounts; it holds nothing in the plan."""

    id: str
    cause: NoStartCause
    reason: str


PlanResult = Planned | NoStart


def plan(
    calendar: Calendar[K], items: Iterable[PlanItem[K]], nodes: NodeBook | None = None
) -> list[PlanResult]:
    """Plan `items`, given in rank order, one after another on `calendar` (module docstring):
    one result per item, in order. Each planned item's window is taken on `calendar`, which
    afterwards holds the whole plan, and booked on `nodes` when given; a caller that wants
    them as they were plans on fresh ones (or gives the windows back). A demand naming a key
    the calendar lacks raises `UnknownResource`, a negative amount `Invalid`."""
    return [_plan_one(calendar, item, nodes) for item in items]


def _plan_one(calendar: Calendar[K], item: PlanItem[K], nodes: NodeBook | None) -> PlanResult:
    first = max(item.not_before, calendar.now)
    if item.deadline < first:
        return NoStart(
            item.id, "expired", f"its deadline {item.deadline} is before its earliest start {first}"
        )
    if not item.options:
        return NoStart(item.id, "no_options", "it has no options (no candidate site)")
    found = choose(calendar, item, nodes)
    if found is None:
        return _no_start(calendar, item)
    start, best = found
    option = item.options[best]
    window = Window.of(start, item.duration)
    if nodes is not None:
        nodes.take(item.id, option.label, window)
    if option.timed is None:
        calendar.take(option.demand, window)
        return Planned(item.id, best, window, starts_now=start == calendar.now)
    option.timed.take(calendar, start)
    return Planned(item.id, best, window, starts_now=start - option.timed.lead == calendar.now)


def choose(
    calendar: Calendar[K], item: PlanItem[K], nodes: NodeBook | None = None
) -> tuple[int, int] | None:
    """(start, option's index) of the option `item` is planned on, on `calendar` as it is
    (module docstring, steps 1 and 2), around what `nodes` has booked when given: the
    earliest start, or for a priced item the lowest score; None when no option has a start
    by its deadline. Reads the calendar and the nodes, changes nothing."""
    first = max(item.not_before, calendar.now)
    if item.deadline < first:
        return None
    if item.options and all(option.priced for option in item.options):
        return _cheapest_start(calendar, item, first, nodes)
    found: tuple[int, int] | None = None
    for index, option in enumerate(item.options):
        # Ties go to the earlier option, so a later one must start strictly earlier to win.
        before = None if found is None else found[0]
        if before == first:
            break
        start = _start(calendar, item, option, first, nodes, before=before)
        if start is not None:
            found = (start, index)
    return found


def _start(
    calendar: Calendar[K],
    item: PlanItem[K],
    option: PlanOption[K],
    first: int,
    nodes: NodeBook | None,
    *,
    before: int | None = None,
) -> int | None:
    """The earliest start of `option` from `first`, by the item's deadline (for an option
    with `timed`, its first part begins by it, `lead` before its start) and before `before`
    when given, at which `nodes` (when given) hold the item's gang for its duration; None if
    there is none."""
    timed = option.timed
    latest = item.deadline if timed is None else item.deadline + timed.lead
    first = max(first, option.nodes_free_at + _lead(option))
    if before is not None:
        latest = min(latest, before - 1)
    while first <= latest:
        if timed is None:
            start = calendar.earliest(
                option.demand, item.duration, not_before=first, deadline=latest
            )
        else:
            start = timed.earliest(calendar, not_before=first, deadline=latest)
        if start is None or nodes is None:
            return start
        held = nodes.free_from(item.id, option.label, start, item.duration)
        if held == start:
            return start
        if held is None:
            return None
        first = held
    return None


def _cheapest_start(
    calendar: Calendar[K], item: PlanItem[K], first: int, nodes: NodeBook | None
) -> tuple[int, int] | None:
    """(start, option's index) of the priced item's option of the lowest score among every
    option's earliest start (ties to the earlier start, then the earlier option), or None.

    Only the differences of the options' delays count, so while searching they are counted
    from `first` instead of the earliest start found. An option then scores at least its
    objective plus its delay (a price is never negative): one is searched only up to the
    start where those two pass the best score found so far, as it cannot win from there on.
    Each start found is priced once."""
    found: list[tuple[int, int]] = []  # (start, index)
    priced: list[tuple[int, float, float]] = []  # (start, price, objective)
    best = math.inf
    for index in shortlist(calendar, item, first):
        option = item.options[index]
        assert option.timed is not None and option.objective is not None
        runs = (best - congestion.OBJECTIVE_WEIGHT * option.objective) / congestion.DELAY_WEIGHT
        before = None
        if runs < math.inf:
            # Past this start it scores more than the best; a second's margin for rounding.
            before = first + math.floor(runs * item.duration) + 2
        start = _start(calendar, item, option, first, nodes, before=before)
        if start is None:
            continue
        price = congestion.price(
            calendar, option.timed, option.compute, start, duration=item.duration
        )
        found.append((start, index))
        priced.append((start, price, option.objective))
        score = congestion.weighed(
            price,
            objective=option.objective,
            start=start,
            first_start=first,
            duration=item.duration,
        )
        best = min(best, score)
    chosen = _lowest(priced, duration=item.duration)
    return None if chosen is None else found[chosen]


def shortlist(calendar: Calendar[K], item: PlanItem[K], first: int) -> list[int]:
    """The indices, in order, of the priced item's options on its `item.sites` best sites
    from `first` (all of them when it has no more sites than that).

    A site is estimated by its compute alone, as its option of the least lead holds it
    (from the start of its staging): the `scarcity` score (`congestion.earliest_score`) at
    its earliest start, the delay counted from `first`; ties to the site whose options come
    first. A site whose compute has no start by the deadline ranks after every site with
    one, so it is kept only when fewer sites have a start."""
    by_site: dict[str, list[int]] = {}
    for index, option in enumerate(item.options):
        by_site.setdefault(option.label, []).append(index)
    if item.sites is None or len(by_site) <= item.sites:
        return list(range(len(item.options)))
    estimated: list[tuple[float, int, str]] = []
    for rank, (label, indices) in enumerate(by_site.items()):
        fastest = min(indices, key=lambda i: _lead(item.options[i]))
        option = item.options[fastest]
        assert option.timed is not None and option.objective is not None
        held = TimedDemand(p for p in option.timed.parts if p.key in option.compute)
        found = congestion.earliest_score(
            calendar,
            held,
            option.compute,
            not_before=max(first, option.nodes_free_at + option.timed.lead),
            deadline=item.deadline + option.timed.lead,
            first_start=first,
            duration=item.duration,
            objective=option.objective,
        )
        estimated.append((math.inf if found is None else found[1], rank, label))
    kept = {label for _, _, label in sorted(estimated)[: item.sites]}
    return [i for i, option in enumerate(item.options) if option.label in kept]


def _lead(option: PlanOption[K]) -> int:
    return 0 if option.timed is None else option.timed.lead


def _lowest(priced: Sequence[tuple[int, float, float]], *, duration: int) -> int | None:
    """The index of the lowest score among (start, price, objective) triples, the delay
    counted from the earliest start; ties to the earlier start, then the earlier."""
    if not priced:
        return None
    first_start = min(start for start, _, _ in priced)
    scored = [
        (
            congestion.weighed(
                price, objective=objective, start=start, first_start=first_start, duration=duration
            ),
            start,
            index,
        )
        for index, (start, price, objective) in enumerate(priced)
    ]
    return min(scored)[2]


def _no_start(calendar: Calendar[K], item: PlanItem[K]) -> NoStart:
    """An item none of whose options fits by its deadline: `never_fits`, naming each option's
    first key beyond capacity, when no option ever fits; else `deadline`."""
    never: list[str] = []
    for option in item.options:
        for key, amount in option.demand.items():
            capacity = calendar.profile(key).capacity
            if amount > capacity:
                never.append(f"{option.label}: wants {amount} of {key!r}, capacity {capacity}")
                break
    count = len(item.options)
    if len(never) == count:
        return NoStart(
            item.id, "never_fits", f"none of its {count} options ever fits ({'; '.join(never)})"
        )
    return NoStart(
        item.id,
        "deadline",
        f"no start by its deadline {item.deadline} on any of its {count} options",
    )
