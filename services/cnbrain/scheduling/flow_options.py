"""The ways to serve a job that moves data: a site, the routes of its flows, their rates.

A `FlowJob` is what the planner needs of a request: its compute amounts (site dimensions of
`CalendarKeys`, in the ledger's units), its run time, its flows (`cnbrain.domain.flows`), its
access node with its continuous bandwidth and latency bound. `flow_options` gives, for one
candidate site, one `FlowOption` per rate step (`RATE_STEPS`): the job's compute on the site
over its run, and every flow on its route, each over the window it needs:

- staging `before_start` at rate r over `[start - T, start)`, T = volume / r;
- staging `stream` at volume / run time over the run;
- delivery at rate r over `[end, end + T)`;
- serving from each province at its rate over the run, on a route within its bound;
- continuous bandwidth from the access node over the run, within the job's bound.

A transfer's full rate is the capacity of its route's narrowest link, or its
`max_rate_gbps` when that is lower; step `f` moves every transfer at `f` times its
full rate: faster transfers start the job earlier and hold more bandwidth. Routes are the
lowest-latency ones, in segments each on its owner's graph (`FlowRouter`: a brain's
`SegmentRouter`, or the segments the owners computed). A site none of whose serving or
access routes is within its bound has no option. Pure: reads the map, holds nothing.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, Protocol, TypeVar

from cnbrain.domain.flows import Endpoint, Flows
from cnbrain.ledger.timed_demand import Part, TimedDemand
from cnbrain.netmap.arrays import MapArrays, gbps_to_mbps
from cnbrain.routing.paths import Blocked
from cnbrain.routing.router import NOTHING_BLOCKED, Route
from cnbrain.scheduling.options import AccessRouter, CalendarKeys, LedgerKeys

RATE_STEPS: Final = (1.0, 0.5, 0.25)
"""The fractions of their full rate at which an option moves its transfers."""

LegKind = Literal["staging", "stream", "delivery", "serving", "continuous"]


@dataclass(frozen=True, slots=True)
class FlowJob:
    """A job as the flow planner sees it (module docstring). `compute` holds (site
    dimension, amount) pairs; `duration` is its run time in whole seconds (at least 1)."""

    id: str
    compute: tuple[tuple[int, int], ...]
    duration: int
    access_node: str
    flows: Flows = field(default_factory=Flows)
    continuous_mbps: int = 0
    max_latency_ms: float = math.inf


@dataclass(frozen=True, slots=True)
class Leg:
    """One flow of an option: `mbps` on every link of `route` over `[start + offset, start +
    offset + duration)`; `peer` names the flow's far end ("site ID" or "province CODE"; the
    access node for the continuous bandwidth)."""

    kind: LegKind
    peer: str
    route: Route
    mbps: int
    offset: int
    duration: int


@dataclass(frozen=True, slots=True)
class FlowOption:
    """One way to serve a job: its compute on `site`, its flows as `legs` at rate step
    `step`, all of it as one `demand` over calendar keys. `lead` is how long its staging
    runs before the start, `tail` how long its delivery runs after the end; `compute` are
    the calendar keys of its compute on the site."""

    site: int
    step: float
    legs: tuple[Leg, ...]
    demand: TimedDemand[Any]
    lead: int
    tail: int
    compute: frozenset[Any]


def transfer_seconds(volume_gb: float, mbps: int) -> int:
    """Seconds to move `volume_gb` GB (10^9 bytes) at `mbps`, rounded up, at least 1."""
    return max(1, math.ceil(round(volume_gb * 8000 / mbps, 6)))


Keys = TypeVar("Keys", CalendarKeys, LedgerKeys)
"""How a map's resources are named on the calendar planned on: the simulator's or a brain's."""


class FlowRouter(AccessRouter, Protocol):
    """Where the routes of flows come from: a `SegmentRouter` on a brain's copy of the map, or
    the segments their owners computed (`routing.composed.OwnerRoutes`)."""

    def site_routes(
        self,
        *,
        from_site: int,
        to_site: int,
        k: int,
        blocked: Blocked = NOTHING_BLOCKED,
        max_latency_ms: float = math.inf,
    ) -> list[Route]: ...


class FlowRoutes(Generic[Keys]):
    """Resolves a job's flow ends on one map and finds their routes with `router`, avoiding
    the links `avoid`; `keys` names the calendar's resources."""

    def __init__(
        self, arrays: MapArrays, router: FlowRouter, keys: Keys, *, avoid: Blocked = NOTHING_BLOCKED
    ) -> None:
        self.arrays = arrays
        self.router = router
        self.keys: Keys = keys
        self.avoid = avoid

    def between(
        self, end: Endpoint, site: int, *, max_latency_ms: float = math.inf
    ) -> Route | None:
        """The best route between `end` and `site` within the bound (links carry both ways)."""
        cmap = self.arrays.map
        if end.site is not None:
            routes = self.router.site_routes(
                from_site=cmap.site_index[end.site],
                to_site=site,
                k=1,
                blocked=self.avoid,
                max_latency_ms=max_latency_ms,
            )
        else:
            assert end.province is not None
            routes = self.from_node(
                cmap.provinces[end.province].access_nodes[0], site, max_latency_ms
            )
        return routes[0] if routes else None

    def from_node(self, node: str, site: int, max_latency_ms: float) -> list[Route]:
        (routes,) = self.router.routes(
            access_node=node, sites=[site], k=1, blocked=self.avoid, max_latency_ms=max_latency_ms
        )
        return routes

    def narrowest_mbps(self, route: Route) -> int:
        """The capacity of the route's narrowest link (Mbps)."""
        return int(self.arrays.link_cap_mbps[route.link_array].min())


def flow_options(
    job: FlowJob,
    site: int,
    routes: FlowRoutes[Any],
    *,
    steps: Sequence[float] = RATE_STEPS,
    whole_life: bool = False,
    held_from_staging: bool = False,
) -> list[FlowOption]:
    """The options of `job` on `site`, one per rate step (one only when it has no transfer),
    or none when a serving or access route is beyond its bound (module docstring).

    `whole_life` is the model without windows, for comparison: every transfer holds its full
    rate over the job's whole run instead of its own window, and there is one option.
    `held_from_staging`: the compute and the continuous bandwidth are held from the start of
    the staging, not of the run (a brain reserves the site when the job's data starts
    moving to it)."""
    fixed = _fixed_legs(job, site, routes)
    transfers = _transfers(job, site, routes)
    if fixed is None or transfers is None:
        return []
    used_steps = steps if transfers and not whole_life else steps[:1]
    keys = routes.keys
    compute = [Part(keys.site(site, d), amount, 0, job.duration) for d, amount in job.compute]
    options: list[FlowOption] = []
    for step in used_steps:
        legs = list(fixed)
        for kind, peer, route, full_mbps, volume in transfers:
            mbps = max(1, int(full_mbps * step))
            if whole_life:
                legs.append(Leg(kind, peer, route, mbps, 0, job.duration))
                continue
            seconds = transfer_seconds(volume, mbps)
            offset = -seconds if kind == "staging" else job.duration
            legs.append(Leg(kind, peer, route, mbps, offset, seconds))
        lead = max([0, *(-leg.offset for leg in legs)])
        tail = max([0, *(leg.offset + leg.duration - job.duration for leg in legs)])
        held = compute
        if held_from_staging and lead:
            legs = [_from_staging(leg, lead) for leg in legs]
            held = [Part(p.key, p.amount, -lead, p.duration + lead) for p in compute]
        parts = held + [
            Part(keys.link(link), leg.mbps, leg.offset, leg.duration)
            for leg in legs
            for link in leg.route.links
        ]
        options.append(
            FlowOption(
                site,
                step,
                tuple(legs),
                TimedDemand(parts),
                lead,
                tail,
                frozenset(part.key for part in compute),
            )
        )
    return options


def _from_staging(leg: Leg, lead: int) -> Leg:
    """`leg`, when continuous, held from `lead` seconds before the start."""
    if leg.kind != "continuous":
        return leg
    return Leg(leg.kind, leg.peer, leg.route, leg.mbps, -lead, leg.duration + lead)


def least_lead(job: FlowJob, site: int, routes: FlowRoutes[Any]) -> int | None:
    """The shortest staging any option of `job` on `site` can have (its transfers at full
    rate on empty links), or None when the site has no option (a serving or access route
    beyond its bound): a lower bound for choosing candidates without building options."""
    transfers = _transfers(job, site, routes)
    if _fixed_legs(job, site, routes) is None or transfers is None:
        return None
    staging = [transfer_seconds(v, mbps) for kind, _, _, mbps, v in transfers if kind == "staging"]
    return max([0, *staging])


def _fixed_legs(job: FlowJob, site: int, routes: FlowRoutes[Any]) -> list[Leg] | None:
    """The legs held over the whole run, or None when one has no route within its bound."""
    legs: list[Leg] = []
    if job.continuous_mbps or math.isfinite(job.max_latency_ms):
        access = routes.from_node(job.access_node, site, job.max_latency_ms)
        if not access:
            return None
        if job.continuous_mbps:
            legs.append(
                Leg("continuous", job.access_node, access[0], job.continuous_mbps, 0, job.duration)
            )
    serving = job.flows.serving
    if serving is not None:
        mbps = max(1, gbps_to_mbps(serving.rate_gbps))
        for province in serving.provinces:
            end = Endpoint(province=province)
            route = routes.between(end, site, max_latency_ms=serving.max_latency_ms)
            if route is None:
                return None
            legs.append(Leg("serving", str(end), route, mbps, 0, job.duration))
    for staging in job.flows.staging:
        if staging.mode != "stream":
            continue
        route = routes.between(staging.source, site)
        if route is None:
            return None
        if route.links:
            mbps = max(1, math.ceil(round(staging.volume_gb * 8000 / job.duration, 6)))
            legs.append(Leg("stream", str(staging.source), route, mbps, 0, job.duration))
    return legs


def _transfers(
    job: FlowJob, site: int, routes: FlowRoutes[Any]
) -> list[tuple[LegKind, str, Route, int, float]] | None:
    """The transfers whose rate an option chooses: (kind, peer, route, full Mbps, volume GB);
    a transfer within the site itself (no link) moves nothing over the network. None when
    one has no route at all."""
    out: list[tuple[LegKind, str, Route, int, float]] = []
    ends: list[tuple[LegKind, Endpoint, float, float | None]] = [
        ("staging", s.source, s.volume_gb, s.max_rate_gbps)
        for s in job.flows.staging
        if s.mode == "before_start"
    ]
    ends += [("delivery", d.destination, d.volume_gb, d.max_rate_gbps) for d in job.flows.delivery]
    for kind, end, volume, max_rate in ends:
        route = routes.between(end, site)
        if route is None:
            return None
        if not route.links:
            continue
        narrowest = routes.narrowest_mbps(route)
        full = narrowest if max_rate is None else min(narrowest, gbps_to_mbps(max_rate))
        out.append((kind, str(end), route, full, volume))
    return out
