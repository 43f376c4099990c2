"""Planning a waiting cross-region request over time: pure functions from its options (sites,
each with its route, as demands over the map's calendar keys), the backbone's calendar and
the timelines the regions sent, to its start: the earliest, or for a request with flows the
one the `scarcity` rule chooses.

An option's resources belong to several owners: the destination site's compute and its
region's links, the backbone's links, the source region's links. The plan joins them into
one calendar: the backbone's profiles from the national brain's own ledger, every other
resource from the timeline its owner sent. An option with a resource no owner answered for
is left out.

No I/O: `national.waiting` asks the regions and reads the backbone's calendar.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from cnbrain.domain.bounds import MAX_EPOCH_S
from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.federation.codec import WireError
from cnbrain.federation.timelines import key_of, load, steps_of
from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.ledger.keys import (
    SITE_COMPUTE,
    ResourceKey,
    accelerator_key,
    link_key,
    site_key,
)
from cnbrain.ledger.timed_demand import TimedDemand
from cnbrain.netmap.arrays import MapArrays
from cnbrain.scheduling.backfill import PlanItem, PlanOption, choose
from cnbrain.v1 import regional_pb2


@dataclass(frozen=True, slots=True)
class WaitPlan:
    """When a waiting request may start: the earliest start found within its max wait
    (epoch seconds) and its site, or None and None; and what was found, for the tenant.
    `demand` is what the plan holds from `lead_s` before its start (its flows' staging) for
    `lead_s + duration_s` (by resource, by id: `demand_by_id`), empty without a start."""

    start_s: int | None
    site_id: str | None
    reason: str
    demand: tuple[tuple[tuple[str, ...], int], ...] = ()
    duration_s: int = 0
    lead_s: int = 0
    room_sites: tuple[str, ...] = ()
    """Without a start: the sites where room made now could let it start (`room_sites`)."""


class Booked(Protocol):
    """Another waiting request's plan: what it holds by resource id (`demand_by_id`) over
    `[start_s, end_s)`, on `nodes` nodes of its site."""

    @property
    def demand(self) -> Sequence[tuple[Sequence[str], int]]: ...

    @property
    def nodes(self) -> int: ...

    @property
    def start_s(self) -> int: ...

    @property
    def end_s(self) -> int: ...


def demand_by_id(
    demand: Mapping[ResourceKey, int], arrays: MapArrays
) -> tuple[tuple[tuple[str, ...], int], ...]:
    """`demand` with every resource named by its site's or link's id instead of its index
    in `arrays` (`("site", site id, resource[, model])`, `("link", link id)`), which hold
    across changes of the map."""
    named: list[tuple[tuple[str, ...], int]] = []
    for key, amount in demand.items():
        if key[0] == "link":
            named.append((("link", arrays.map.links[key[1]].id), amount))
        else:
            rest = tuple(str(part) for part in key[2:])
            named.append((("site", arrays.map.sites[key[1]].id, *rest), amount))
    return tuple(named)


def demand_by_key(
    named: Sequence[tuple[Sequence[str], int]], arrays: MapArrays
) -> dict[ResourceKey, int]:
    """The demand `demand_by_id` named, by key of `arrays`; a site or link no longer on the
    map, or a key of another shape, is left out."""
    demand: dict[ResourceKey, int] = {}
    for key, amount in named:
        if len(key) == 2 and key[0] == "link" and key[1] in arrays.link_index:
            demand[link_key(arrays.link_index[key[1]])] = amount
        elif len(key) < 3 or key[0] != "site" or key[1] not in arrays.map.site_index:
            continue
        elif len(key) == 3 and key[2] in SITE_COMPUTE:
            demand[site_key(arrays.map.site_index[key[1]], key[2])] = amount
        elif len(key) == 4 and key[2] == "acc":
            demand[accelerator_key(arrays.map.site_index[key[1]], key[3])] = amount
    return demand


def book(calendar: Calendar[ResourceKey], plans: Sequence[Booked], arrays: MapArrays) -> None:
    """Take from `calendar` what each plan of `plans` holds over its window (from the
    calendar's now on; of the resources the calendar has, at every instant as much as is
    free then), so that a request planned on it starts where no other plan stands."""
    for plan in plans:
        start = max(plan.start_s, calendar.now)
        if start < plan.end_s:
            demand = demand_by_key(plan.demand, arrays)
            calendar.take_up_to(demand, Window(start, plan.end_s))


@dataclass(frozen=True, slots=True)
class Wanted:
    """The sites and links to ask one owner for."""

    site_ids: list[str]
    link_ids: list[str]


def owner_of(key: ResourceKey, arrays: MapArrays) -> str:
    """The owner of a calendar key: a link's owner, or the region of a site's province."""
    if key[0] == "link":
        return arrays.map.links[key[1]].owner
    return region_of(key[1], arrays)


def region_of(site: int, arrays: MapArrays) -> str:
    """The region of the province of the site of index `site`."""
    cmap = arrays.map
    return cmap.provinces[cmap.sites[site].province].region


def wanted(options: Sequence[PlanOption[ResourceKey]], arrays: MapArrays) -> dict[str, Wanted]:
    """By owner (a region id, or `NATIONAL_OWNER`), the sites and links `options` use."""
    out: dict[str, Wanted] = {}
    for option in options:
        for key in option.demand:
            one = out.setdefault(owner_of(key, arrays), Wanted([], []))
            if key[0] == "link":
                link = arrays.map.links[key[1]].id
                if link not in one.link_ids:
                    one.link_ids.append(link)
            else:
                site = arrays.map.sites[key[1]].id
                if site not in one.site_ids:
                    one.site_ids.append(site)
    return out


def joint_calendar(
    backbone: Calendar[ResourceKey],
    answers: Mapping[str, regional_pb2.GetTimelinesResponse],
    *,
    options: Sequence[PlanOption[ResourceKey]],
    arrays: MapArrays,
) -> Calendar[ResourceKey]:
    """One calendar from `backbone.now` on of the resources of `options`: the backbone's
    links as `backbone` has them, the others as the region owning them answered (`answers`
    by region id; a timeline of a resource the region does not own is ignored). Raises
    WireError for a timeline that names what this map lacks or is malformed."""
    now = backbone.now
    used = {key for option in options for key in option.demand}
    capacities: dict[ResourceKey, int] = {}
    steps: dict[ResourceKey, list[tuple[int, int]]] = {}
    for key in used:
        if owner_of(key, arrays) == NATIONAL_OWNER and key in backbone:
            profile = backbone.profile(key)
            capacities[key] = profile.capacity
            steps[key] = list(profile.steps())
    for region_id, answer in answers.items():
        for message in answer.timelines:
            key = key_of(message, arrays=arrays)
            if key not in used or owner_of(key, arrays) != region_id:
                continue
            capacities[key], steps[key] = steps_of(message, now=answer.now_s)
    calendar: Calendar[ResourceKey] = Calendar(capacities, now=now)
    for key, its_steps in steps.items():
        load(calendar, key, its_steps)
    return calendar


def waiting_for_nodes(
    options: Sequence[PlanOption[ResourceKey]],
    answers: Mapping[str, regional_pb2.GetTimelinesResponse],
    arrays: MapArrays,
) -> list[PlanOption[ResourceKey]]:
    """`options`, in order, each on a site whose region answered that its nodes do not hold
    the request's gang now starting no earlier than they will (`PlanOption.nodes_free_at`;
    never, for a site whose nodes never hold it). Raises WireError for an answer with more
    entries than the map has sites, about a site the map lacks or its region does not own,
    or with a time before its answer's now."""
    free_at: dict[str, int] = {}
    for region_id, answer in answers.items():
        if len(answer.nodes_free_at) > len(arrays.map.sites):
            raise WireError(f"region {region_id} answered nodes of more sites than the map has")
        for one in answer.nodes_free_at:
            site = arrays.map.site_index.get(one.site_id)
            if site is None or region_of(site, arrays) != region_id:
                raise WireError(f"region {region_id} answered nodes of a site not its own")
            if one.at_s and not answer.now_s <= one.at_s <= MAX_EPOCH_S:
                raise WireError(f"region {region_id} answered nodes free at {one.at_s}")
            free_at[one.site_id] = one.at_s
    out = []
    for option in options:
        at = free_at.get(option.label)
        out.append(option if at is None else replace(option, nodes_free_at=at or MAX_EPOCH_S))
    return out


def planned_start(
    calendar: Calendar[ResourceKey],
    options: Sequence[PlanOption[ResourceKey]],
    *,
    duration_s: int,
    deadline_s: int,
    sites: int | None = None,
) -> tuple[int, PlanOption[ResourceKey]] | None:
    """The start by `deadline_s`, for `duration_s`, of the option the admission planner
    would choose among those whose resources `calendar` has all (`backfill.choose`), with
    that option; None if none has a start. The earliest start (ties: the option first in
    `options`); when the options are all priced (`PlanOption.priced`: a job's flows), the
    one the `scarcity` rule chooses among their earliest starts on the `sites` sites whose
    compute alone scores best (`backfill.shortlist`; None: all). An option with parts in
    windows of their own (`PlanOption.timed`) starts where they all fit, its first part
    beginning by `deadline_s`."""
    known = tuple(o for o in options if all(key in calendar for key in o.demand))
    if not known:
        return None
    item = PlanItem("waiting", known, duration_s, calendar.now, deadline_s, sites=sites)
    found = choose(calendar, item)
    return None if found is None else (found[0], known[found[1]])


def room_sites(
    calendar: Calendar[ResourceKey], options: Sequence[PlanOption[ResourceKey]]
) -> tuple[str, ...]:
    """The sites of `options`, in order, where freeing compute now could let the request
    start: an option without windows of its own (its compute and path held from its start),
    or one whose other parts (its flows and continuous bandwidth) all fit on `calendar` from
    its earliest start, its staging beginning now. An option with a resource `calendar`
    lacks counts for nothing."""
    sites: dict[str, None] = {}
    now = calendar.now
    for option in options:
        if not all(key in calendar for key in option.demand):
            continue
        timed = option.timed
        if timed is not None:
            flows = TimedDemand(p for p in timed.parts if p.key not in option.compute)
            if flows.earliest(calendar, not_before=now, deadline=now + timed.lead) is None:
                continue
        sites[option.label] = None
    return tuple(sites)
