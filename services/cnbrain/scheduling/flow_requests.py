"""Queued requests with flows as options of the admission round.

`flow_plan_options` gives, per request, the options of its candidate sites: the engine's best
`WIDEN` x N sites on the empty map (as `options.ledger_options` ranks them), of which the
planners plan it on the N whose compute alone scores best on the calendar at each round
(`backfill.PlanItem.sites`), so that its Top-N follows the load; each site with one option
per rate step of `flow_options`, best site first and, on one site, the fastest transfers
first. An option holds the request's compute and continuous bandwidth from the start of its
staging (the brain reserves the site when the data starts moving to it), and every flow over
its own window (`PlanOption.timed`); it is priced with its site's objective, so that the
planners choose among them by the `scarcity` rule (`backfill`); it comes with the
`FlowOption` it was made of, whose legs the brain holds once the request is admitted
(`flow_holds`). Pure: reads the map, holds nothing.
"""

from collections.abc import Sequence
from typing import Any, Final

from cnbrain.domain.flows import Flows
from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import FlowHold, duration_seconds
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.placement.batch import RequestBatch
from cnbrain.placement.engine import PlacementEngine
from cnbrain.routing.paths import Blocked
from cnbrain.routing.router import NOTHING_BLOCKED
from cnbrain.scheduling.backfill import PlanOption
from cnbrain.scheduling.flow_options import (
    FlowJob,
    FlowOption,
    FlowRouter,
    FlowRoutes,
    Keys,
    flow_options,
)
from cnbrain.scheduling.options import RANK_CHUNK, compute_amounts
from cnbrain.scheduling.resources import Resources

FlowPlanOption = tuple[PlanOption[Any], FlowOption]
"""An option of the round, with the flow option it was made of."""

WIDEN: Final = 4
"""How many times its Top-N a request with flows has sites with options, for the planners to
choose its Top-N from against the calendar."""

RUN_LONG = frozenset({"continuous", "serving", "stream"})
"""The kinds of leg held over the whole run: what preemption may free on a link."""


def flow_sites(
    engine: PlacementEngine, request: PlacementRequest, *, top_n: int
) -> list[tuple[int, float]]:
    """The sites (index, objective) that `flow_plan_options` gives `request` options on."""
    empty = Snapshot.empty(engine.arrays)
    ((sites, _),) = engine.rank_sites_many([request], snapshot=empty, n=WIDEN * top_n)
    return list(sites)


def flow_plan_options(
    engine: PlacementEngine,
    requests: Sequence[PlacementRequest],
    *,
    top_n: int,
    keys: Keys,
    avoid: Blocked = NOTHING_BLOCKED,
) -> list[tuple[FlowPlanOption, ...]]:
    """Per request of `requests`, in order, its options on its best `WIDEN * top_n` sites
    (module docstring), its flows routed by the engine around the links `avoid`."""
    arrays = engine.arrays
    empty = Snapshot.empty(arrays)
    routes = FlowRoutes(arrays, engine.router, keys, avoid=avoid)
    out: list[tuple[FlowPlanOption, ...]] = []
    for lo in range(0, len(requests), RANK_CHUNK):
        chunk = list(requests[lo : lo + RANK_CHUNK])
        ranked = engine.rank_sites_many(chunk, snapshot=empty, n=WIDEN * top_n)
        batch = RequestBatch.build(chunk, arrays, engine.config.weight_matrix)
        for row, (sites, _) in enumerate(ranked):
            out.append(_options_on(_job(batch, row, chunk[row], keys), sites, routes))
    return out


def site_flow_options(
    engine: PlacementEngine,
    request: PlacementRequest,
    sites: Sequence[tuple[int, float]],
    *,
    keys: Keys,
    router: FlowRouter,
) -> tuple[FlowPlanOption, ...]:
    """`request`'s options on `sites` (index, objective; `flow_sites`), as
    `flow_plan_options` builds them, its flows routed by `router`."""
    arrays = engine.arrays
    batch = RequestBatch.build([request], arrays, engine.config.weight_matrix)
    return _options_on(_job(batch, 0, request, keys), sites, FlowRoutes(arrays, router, keys))


def _job(batch: RequestBatch, row: int, request: PlacementRequest, keys: Keys) -> FlowJob:
    """`request`, row `row` of `batch`, as the flow planner sees it."""
    return FlowJob(
        id=request.id,
        compute=tuple(compute_amounts(batch, row, keys)),
        duration=duration_seconds(request.duration_hours),
        access_node=batch.access_nodes[row],
        flows=request.flows or Flows(),
        continuous_mbps=int(batch.need_mbps[row]),
        max_latency_ms=float(batch.max_latency_ms[row]),
    )


def _options_on(
    job: FlowJob, sites: Sequence[tuple[int, float]], routes: FlowRoutes[Any]
) -> tuple[FlowPlanOption, ...]:
    """`job`'s options on `sites` (index, objective), best site first."""
    options: list[FlowPlanOption] = []
    for site, objective in sites:
        label = routes.arrays.map.sites[site].id
        for option in flow_options(job, site, routes, held_from_staging=True):
            options.append((_plan_option(option, label, objective, routes), option))
    return tuple(options)


def _plan_option(
    option: FlowOption, label: str, objective: float, routes: FlowRoutes[Any]
) -> PlanOption[Any]:
    """`option` as the round plans it: its timed demand, the most it holds of each key at
    once, what it holds of each link over the whole run, and its price (its site's
    `objective` and its compute's keys), so that the planners choose by scarcity."""
    peak: dict[Any, int] = {}
    for part in option.demand.parts:
        peak[part.key] = max(peak.get(part.key, 0), part.amount)
    links = routes.arrays.map.links
    run_long: dict[str, int] = {}
    for leg in option.legs:
        if leg.kind in RUN_LONG:
            for link in leg.route.links:
                run_long[links[link].id] = run_long.get(links[link].id, 0) + leg.mbps
    return PlanOption(
        label,
        peak,
        Resources.bandwidth(run_long),
        timed=option.demand,
        objective=objective,
        compute=option.compute,
    )


def flow_holds(
    reservation_id: str, option: FlowOption, *, start_s: int, arrays: MapArrays
) -> list[FlowHold]:
    """The flows that reservation `reservation_id` holds for a run starting at epoch second
    `start_s` on `option`: every leg but the continuous bandwidth (the reservation's own
    path holds it), each over its own window; a leg within the site crosses no link and
    holds nothing."""
    links = arrays.map.links
    return [
        FlowHold(
            reservation_id=reservation_id,
            kind=leg.kind,
            peer=leg.peer,
            link_ids=tuple(links[link].id for link in leg.route.links),
            mbps=leg.mbps,
            window=Window.of(start_s + leg.offset, leg.duration),
        )
        for leg in option.legs
        if leg.kind != "continuous" and leg.route.links
    ]
