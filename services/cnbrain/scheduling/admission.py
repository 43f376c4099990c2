"""One admission round: the queue ordered, planned over the calendar, and sorted into what to do.

The round is the one admission code of the project: the regional brain's admission loop and
the simulator both call `admission_round`, and act on its answer in their own way (the brain
by reserving and writing, the simulator on its ledger).

Steps, on a calendar that holds the windows of the running and admitted work from its `now`:

1. the waiting requests are put in admission order (`fair_share.fair_order`: class, weighted
   DRF between tenants, age);
2. quotas over time (when `cohort_of` is given): in that order, a request whose tenant's
   cohort refuses it (`cohorts.Cohort.can_admit`) is `over_quota`: it waits with the reason,
   and is not planned (it takes no room from the others). The usage a request is checked
   against is its tenant's running work plus the requests of its tenant before it in the
   order that were not refused (as if all of them started now); and the idle quota of the
   other members is their nominal less their usage less what their own waiting requests ask
   within it (a member with work waiting for its nominal lends none of that part);
3. the others are planned in that order with conservative backfill (`backfill.plan`): each
   gets the earliest start within its deadline on one of its options, around the windows of
   the requests before it (and, with `nodes`, around their gangs on the nodes of sites with
   node pools);
4. each planned request is sorted by its plan:
   - `admit`: planned to start now: it may be admitted now, on its planned option;
   - `later`: planned to start later, within its deadline: it waits with that estimated start;
   - `expired`: its deadline has passed: it is rejected with the reason;
   - `impossible`: it has no option, or none of its options ever fits the whole capacity: it
     is rejected with the reason (waiting cannot help);
   - `stuck`: no start by its deadline on any option, though it may fit one day (running work
     may end early, or be preempted): it waits, with no estimated start;
5. preemption (when `running` and `free_now` are given): a `stuck` request whose class may
   preempt gets victims (`preemption.choose_victims`) for one of its options, the first
   whose need they cover. An option's need is what it lacks now: the request's compute less
   what its site has free (`free_now(site)`), and, when `free_bandwidth_now` is given, on
   each link of its path (`PlanOption.bandwidth`) the Mbps it asks less what the link has
   free (`free_bandwidth_now(link_id)`). The victims are running work of lower, preemptible
   classes that hold what is lacking: compute on the option's site, or bandwidth on a
   lacking link of its path, wherever that work runs. An option that waits for nodes of a
   site with node pools (`PlanOption.nodes_free_at`) also needs victims on its site whose
   nodes, freed, hold its gang (`nodes_freed`, `preemption.until_enough`), though the site's
   totals hold it now. A victim is chosen for one preemptor
   only in a round, and what a preemption frees beyond its preemptor's ask (on every site
   and link its victims held) counts as free for the next preemptors. Reclaim: when the
   preemptor's tenant is in a cohort and stays within its nominal quota with it, the work of
   the cohort's other members that is borrowed (its tenant holds more than its nominal in a
   dimension the work uses) is a candidate too, whatever its class, and is taken first (as
   if of the lowest class). A round gives victims to at most `max_preemptors` requests (the
   first in admission order; the others are looked at again in the next rounds). The caller
   requeues the victims and releases what they hold (compute and bandwidth); the preemptor
   is admitted by a later round, once that is done.

Pure: no clock and no I/O; the only state changed is the calendar given, which afterwards
holds the whole plan.
"""

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Generic, TypeVar

from cnbrain.ledger.calendar import Calendar
from cnbrain.scheduling.backfill import NodeBook, NoStart, PlanItem, Planned, PlanOption, plan
from cnbrain.scheduling.classes import MIN_CLASS_VALUE, PriorityClasses
from cnbrain.scheduling.cohorts import Cohort
from cnbrain.scheduling.fair_share import fair_order
from cnbrain.scheduling.preemption import NodesFreed, choose_victims, until_enough
from cnbrain.scheduling.resources import Resources, link_of
from cnbrain.scheduling.work import QueuedWork, RunningWork, usage_by_tenant

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Waiting(Generic[K]):
    """A queued request as the round sees it: `work` (its tenant, class, demand and age),
    its `options` best first (`backfill.PlanOption`), its `duration` and `deadline` in whole
    seconds of the calendar's clock; priced options are planned on at most `sites` of their
    sites (`backfill.PlanItem.sites`)."""

    work: QueuedWork
    options: tuple[PlanOption[K], ...]
    duration: int
    deadline: int
    sites: int | None = None


@dataclass(frozen=True, slots=True)
class Preemption:
    """`preemptor` cannot start by its deadline; preempting `victims` (ids of running work)
    frees what its option on `site` lacks now: compute on `site` (victims running there) and
    bandwidth on the links of its path (victims holding them, on any site)."""

    preemptor: str
    site: str
    victims: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class OverQuota:
    """Request `id` waits for its quota: its tenant's cohort refuses it, for `reason`."""

    id: str
    reason: str


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
    over_quota: list[OverQuota] = field(default_factory=list)
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
    cohort_of: Mapping[str, Cohort] | None = None,
    free_bandwidth_now: Callable[[str], int] | None = None,
    elsewhere: Mapping[str, Resources] | None = None,
    nodes_freed: NodesFreed | None = None,
    nodes: NodeBook | None = None,
) -> Round:
    """One round over `waiting` on `calendar` (module docstring). `capacity` is the region's
    whole capacity and `running` the work that holds part of it (each tenant's usage, for the
    fair order, and the candidates of preemption); `weights` are the tenants' fair-share
    weights. `free_now(site)` is what a site has free at the calendar's now, as a resource
    vector; without it nothing is preempted. `free_bandwidth_now(link_id)` is the Mbps a link
    has free at the calendar's now; without it an option's links do not count in what it
    lacks (only its site's compute does). `cohort_of` gives the cohort of each tenant in one
    (absent: no quota over time). `elsewhere` is what tenants hold beyond `running` that
    counts as their use here all the same (the compute of their cross-region requests, held
    in other regions): it counts in the fair order and against the cohorts' quotas, and is
    never preempted. `nodes_freed` tells whether victims free the nodes a request's option
    waits for (`PlanOption.nodes_free_at`); without it such an option gets victims for its
    totals only. `nodes` books the gangs planned on the nodes of their sites, and starts
    each gang only where the nodes hold it around those before it (`backfill.NodeBook`).
    Raises `Invalid` naming the field for a class no class of `classes`
    has, or a request given twice."""
    by_id = {w.work.id: w for w in waiting}
    held = usage_by_tenant(running)
    for tenant, amount in (elsewhere or {}).items():
        held[tenant] = held.get(tenant, Resources()) + amount
    ordered = fair_order(
        (w.work for w in waiting),
        classes=classes,
        usage=held,
        capacity=capacity,
        weights=weights,
    )
    result = Round(order=[work.id for work in ordered])
    cohorts = cohort_of or {}
    if cohorts:
        result.over_quota.extend(_over_quota(ordered, held, cohorts))
    refused = {o.id for o in result.over_quota}
    items = [
        PlanItem(
            id=work.id,
            options=by_id[work.id].options,
            duration=by_id[work.id].duration,
            not_before=calendar.now,
            deadline=by_id[work.id].deadline,
            sites=by_id[work.id].sites,
        )
        for work in ordered
        if work.id not in refused
    ]
    for planned in plan(calendar, items, nodes):
        if isinstance(planned, Planned) and planned.starts_now:
            result.admit.append(planned)
        elif isinstance(planned, Planned):
            result.later.append(planned)
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
                _FreeNow(free_now, free_bandwidth_now),
                calendar.now,
                max_preemptors,
                cohorts,
                held,
                nodes_freed,
            )
        )
    return result


class _FreeNow:
    """What is free at the round's now, as preemption weighs it: per site its compute, per
    link its bandwidth (over link dimensions), each less what earlier preemptors of the round
    take of it and plus what their victims free beyond that."""

    def __init__(self, site: Callable[[str], Resources], link: Callable[[str], int] | None) -> None:
        self._site, self._link = site, link
        self._sites: dict[str, Resources] = {}
        self._links = Resources()
        """Per site, and over link dimensions: freed by victims less taken by preemptors."""

    def lacking(self, demand: Resources, option: PlanOption[K]) -> Resources:
        """What `option` (for a request of compute `demand`) lacks now: compute on its site
        and, when links count, bandwidth on the links of its path."""
        site = option.label
        free = self._site(site) + self._sites.get(site, Resources())
        need = (demand - free).positive_part()
        if self._link is None or option.bandwidth.is_zero():
            return need
        free_links = Resources.bandwidth(
            {link_of(d): self._link(link_of(d)) for d in option.bandwidth}
        )
        return need + (option.bandwidth - free_links - self._links).positive_part()

    def take(self, demand: Resources, option: PlanOption[K]) -> None:
        """The preemptor takes `demand` on `option`'s site and its bandwidth on its path."""
        site = option.label
        self._sites[site] = self._sites.get(site, Resources()) - demand
        if self._link is not None:
            self._links = self._links - option.bandwidth

    def free(self, victims: Sequence[RunningWork]) -> None:
        """`victims` free their compute on their sites and their bandwidth on their links."""
        for work in victims:
            self._sites[work.site] = self._sites.get(work.site, Resources()) + work.demand
            if self._link is not None:
                self._links = self._links + work.bandwidth


def _preemptions(
    stuck: Sequence[Waiting[K]],
    classes: PriorityClasses,
    running: Sequence[RunningWork],
    free: _FreeNow,
    now: int,
    most: int,
    cohort_of: Mapping[str, Cohort],
    usage: Mapping[str, Resources],
    nodes_freed: NodesFreed | None,
) -> list[Preemption]:
    """Victims for the stuck requests, in admission order, each victim taken once: for the
    first of a request's options whose need (what it lacks now) they cover, and, for an
    option that waits for nodes (`nodes_freed`), whose nodes they free too. A request that
    what is free and already freed covers on an option takes that room, and no victim."""
    taken: set[str] = set()
    out: list[Preemption] = []
    on_site: dict[str, list[RunningWork]] = {}
    on_link: dict[str, list[RunningWork]] = {}
    for work in running:
        on_site.setdefault(work.site, []).append(work)
        for dimension in work.bandwidth:
            on_link.setdefault(dimension, []).append(work)
    lowest = min((w.class_value for w in running if w.preemptible), default=None)
    for one in stuck:
        if len(out) >= most:
            break
        value = classes.get(one.work.class_name).value
        borrowed = _reclaimable(one.work, cohort_of, usage, running)
        if not borrowed and (lowest is None or value <= lowest):
            continue  # nothing it may preempt runs anywhere
        for option in one.options:
            need = free.lacking(one.work.demand, option)
            waits = nodes_freed is not None and option.nodes_free_at > now
            if need.is_zero() and not waits:
                # What earlier preemptions free covers it already: it takes that room.
                free.take(one.work.demand, option)
                break
            site = option.label
            # Only work on the site or on a lacking link can free any of the need.
            near = {id(w): w for w in on_site.get(site, ())}
            for dimension in need:
                near.update((id(w), w) for w in on_link.get(dimension, ()))
            candidates = [
                _as_lowest(w) if w.id in borrowed else w
                for w in near.values()
                if w.id not in taken
                and (w.id in borrowed or (w.preemptible and w.class_value < value))
            ]
            if not candidates:
                continue
            victims = choose_victims(need, value, candidates, now=now, site=site)
            if victims is not None and nodes_freed is not None and waits:
                enough = partial(nodes_freed, one.work.id, site)
                victims = until_enough(victims, candidates, site, enough)
            if not victims:
                continue
            taken.update(victims)
            chosen = set(victims)
            free.free([w for w in candidates if w.id in chosen])
            free.take(one.work.demand, option)
            out.append(Preemption(one.work.id, site, tuple(victims)))
            break
    return out


def _reclaimable(
    work: QueuedWork,
    cohort_of: Mapping[str, Cohort],
    usage: Mapping[str, Resources],
    running: Sequence[RunningWork],
) -> set[str]:
    """The ids of the running work `work`'s tenant may reclaim: when it is in a cohort and
    stays within its nominal quota with `work`, the work of the cohort's other members whose
    tenant holds more than its nominal in a dimension that work uses."""
    cohort = cohort_of.get(work.tenant)
    if cohort is None or cohort.can_admit(work.tenant, work.demand, usage).verdict != "nominal":
        return set()
    out: set[str] = set()
    for other in running:
        if other.tenant == work.tenant or cohort_of.get(other.tenant) is not cohort:
            continue
        over = cohort.borrowed(other.tenant, usage.get(other.tenant, Resources()))
        if any(other.demand[d] > 0 for d in over):
            out.add(other.id)
    return out


def _as_lowest(work: RunningWork) -> RunningWork:
    """Borrowed work as a victim of any class: taken before every other candidate."""
    return replace(work, class_value=MIN_CLASS_VALUE, preemptible=True)


def _over_quota(
    ordered: Sequence[QueuedWork], usage: Mapping[str, Resources], cohort_of: Mapping[str, Cohort]
) -> list[OverQuota]:
    """The requests of `ordered` (in admission order) that their cohorts refuse (module
    docstring, step 2)."""
    waiting: dict[str, Resources] = {}
    for work in ordered:
        if work.tenant in cohort_of:
            waiting[work.tenant] = waiting.get(work.tenant, Resources()) + work.demand
    counted = dict(usage)
    refused: list[OverQuota] = []
    for work in ordered:
        cohort = cohort_of.get(work.tenant)
        if cohort is None:
            continue
        waiting[work.tenant] = waiting[work.tenant] - work.demand
        view = {
            member: counted.get(member, Resources())
            + _claimed(cohort, member, counted, waiting.get(member, Resources()))
            for member in cohort.members
            if member != work.tenant
        }
        view[work.tenant] = counted.get(work.tenant, Resources())
        verdict = cohort.can_admit(work.tenant, work.demand, view)
        if verdict.admitted:
            counted[work.tenant] = view[work.tenant] + work.demand
        else:
            refused.append(OverQuota(work.id, verdict.reason or "over its quota"))
    return refused


def _claimed(
    cohort: Cohort, member: str, counted: Mapping[str, Resources], waiting: Resources
) -> Resources:
    """What `member`'s waiting requests ask within its unused nominal: not idle, not lent."""
    unused = (cohort.quota(member).nominal - counted.get(member, Resources())).positive_part()
    return Resources({d: min(waiting[d], unused[d]) for d in waiting.positive_part()})
