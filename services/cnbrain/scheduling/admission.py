"""One admission round: the queue ordered, planned over the calendar, and sorted into what to do.

The round is the one admission code of the project: the regional brain's admission loop and
the simulator both call `admission_round`, and act on its answer in their own way (the brain
by reserving and writing, the simulator on its ledger).

Steps, on a calendar that holds the windows of the running and admitted work from its `now`:

1. the waiting requests are put in admission order (`fair_share.fair_order`: class, weighted
   DRF between tenants, age);
2. they are planned in that order with conservative backfill (`backfill.plan`): each gets the
   earliest start within its deadline on one of its options, around the windows of the
   requests before it;
3. each request is sorted by its plan:
   - `admit`: planned to start now: it may be admitted now, on its planned option;
   - `later`: planned to start later, within its deadline: it waits with that estimated start;
   - `expired`: its deadline has passed: it is rejected with the reason;
   - `impossible`: it has no option, or none of its options ever fits the whole capacity: it
     is rejected with the reason (waiting cannot help);
   - `stuck`: no start by its deadline on any option, though it may fit one day (running work
     may end early, or be preempted): it waits, with no estimated start;
4. preemption (when `running` is given): a `stuck` request whose class may preempt gets
   victims (`preemption.choose_victims`) on the site of one of its options: running work of
   lower, preemptible classes whose demands cover what the site lacks for it now. A victim
   is chosen for one preemptor only in a round, and a round gives victims to at most
   `max_preemptors` requests (the first in admission order; the others are looked at again
   in the next rounds). The caller requeues the victims and releases what they hold; the
   preemptor is admitted by a later round, once that is done.

Pure: no clock and no I/O; the only state changed is the calendar given, which afterwards
holds the whole plan.
"""

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from cnbrain.ledger.calendar import Calendar
from cnbrain.scheduling.backfill import NoStart, PlanItem, Planned, PlanOption, plan
from cnbrain.scheduling.classes import PriorityClasses
from cnbrain.scheduling.fair_share import fair_order
from cnbrain.scheduling.preemption import choose_victims
from cnbrain.scheduling.resources import Resources
from cnbrain.scheduling.work import QueuedWork, RunningWork, usage_by_tenant

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Waiting(Generic[K]):
    """A queued request as the round sees it: `work` (its tenant, class, demand and age),
    its `options` best first (`backfill.PlanOption`), its `duration` and `deadline` in whole
    seconds of the calendar's clock."""

    work: QueuedWork
    options: tuple[PlanOption[K], ...]
    duration: int
    deadline: int


@dataclass(frozen=True, slots=True)
class Preemption:
    """`preemptor` cannot start by its deadline; preempting `victims` (ids of running work,
    all on `site`) frees what it lacks there now."""

    preemptor: str
    site: str
    victims: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Round:
    """What one round decided (module docstring). `order` is every waiting request's id in
    admission order; `position` its place in it (0 first). The lists keep that order."""

    order: list[str]
    admit: list[Planned] = field(default_factory=list)
    later: list[Planned] = field(default_factory=list)
    expired: list[NoStart] = field(default_factory=list)
    impossible: list[NoStart] = field(default_factory=list)
    stuck: list[NoStart] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)

    @property
    def position(self) -> dict[str, int]:
        return {request_id: index for index, request_id in enumerate(self.order)}


_IMPOSSIBLE = frozenset({"no_options", "never_fits"})

MAX_PREEMPTORS = 64
"""A round gives victims to at most this many stuck requests, by default."""


def admission_round(
    calendar: Calendar[K],
    waiting: Sequence[Waiting[K]],
    *,
    classes: PriorityClasses,
    capacity: Resources,
    running: Sequence[RunningWork] = (),
    weights: Mapping[str, float] | None = None,
    free_now: Callable[[str], Resources] | None = None,
    max_preemptors: int = MAX_PREEMPTORS,
) -> Round:
    """One round over `waiting` on `calendar` (module docstring). `capacity` is the region's
    whole capacity and `running` the work that holds part of it (each tenant's usage, for the
    fair order, and the candidates of preemption); `weights` are the tenants' fair-share
    weights. `free_now(site)` is what a site has free at the calendar's now, as a resource
    vector; without it nothing is preempted. Raises `Invalid` naming the field for a class
    no class of `classes` has, or a request given twice."""
    by_id = {w.work.id: w for w in waiting}
    ordered = fair_order(
        (w.work for w in waiting),
        classes=classes,
        usage=usage_by_tenant(running),
        capacity=capacity,
        weights=weights,
    )
    items = [
        PlanItem(
            id=work.id,
            options=by_id[work.id].options,
            duration=by_id[work.id].duration,
            not_before=calendar.now,
            deadline=by_id[work.id].deadline,
        )
        for work in ordered
    ]
    result = Round(order=[work.id for work in ordered])
    for planned in plan(calendar, items):
        if isinstance(planned, Planned):
            (result.admit if planned.starts_now else result.later).append(planned)
        elif planned.cause == "expired":
            result.expired.append(planned)
        elif planned.cause in _IMPOSSIBLE:
            result.impossible.append(planned)
        else:
            result.stuck.append(planned)
    if free_now is not None and running:
        result.preemptions.extend(
            _preemptions(
                [by_id[s.id] for s in result.stuck],
                classes,
                running,
                free_now,
                calendar.now,
                max_preemptors,
            )
        )
    return result


def _preemptions(
    stuck: Sequence[Waiting[K]],
    classes: PriorityClasses,
    running: Sequence[RunningWork],
    free_now: Callable[[str], Resources],
    now: int,
    most: int,
) -> list[Preemption]:
    """Victims for the stuck requests, in admission order, each victim taken once: on the
    first of a request's options whose site can free what it lacks. A request that what is
    free and already freed covers on an option's site takes that room, and no victim."""
    taken: set[str] = set()
    freed: dict[str, Resources] = {}
    out: list[Preemption] = []
    by_site: dict[str, list[RunningWork]] = {}
    for work in running:
        if work.preemptible:
            by_site.setdefault(work.site, []).append(work)
    lowest = min((w.class_value for w in running if w.preemptible), default=None)
    for one in stuck:
        if len(out) >= most:
            break
        value = classes.get(one.work.class_name).value
        if lowest is None or value <= lowest:
            continue  # nothing it may preempt runs anywhere
        for option in one.options:
            site = option.label
            if site not in by_site:
                continue
            free = free_now(site) + freed.get(site, Resources())
            need = (one.work.demand - free).positive_part()
            if need.is_zero():
                # What earlier preemptions free covers it already: it takes that room.
                freed[site] = freed.get(site, Resources()) - one.work.demand
                break
            on_site = [w for w in by_site[site] if w.id not in taken and w.class_value < value]
            victims = choose_victims(need, value, on_site, now=now)
            if not victims:
                continue
            taken.update(victims)
            released = sum((w.demand for w in on_site if w.id in victims), Resources())
            freed[site] = freed.get(site, Resources()) + released - one.work.demand
            out.append(Preemption(one.work.id, site, tuple(victims)))
            break
    return out
