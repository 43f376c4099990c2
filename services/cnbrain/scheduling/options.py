"""Options of queued requests for the admission planner, from the placement engine.

An option (`backfill.PlanOption`) is one candidate site for a request, as a demand over
calendar keys: the request's compute on the site and its bandwidth on every link of the path to
it (also by link id, as `PlanOption.bandwidth`, for preemption). `CalendarKeys` numbers a map's
resources as such keys (and gives their capacities, to build the region's `Calendar`);
`request_options` asks the engine for each request's Top-N sites and their paths;
`site_options` builds one request's options on sites already ranked, each route from a router
of its own (on the national brain, the segments their owners computed). What the engine decides
on is static (the map, the request's constraints, whole capacity), so options are built once
per request, not per cycle. `free_now_on` and `free_bandwidth_now_on` read what a site and a
link have free now on a calendar.
"""

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.calendar import Calendar
from cnbrain.ledger.keys import SITE_COMPUTE, ResourceKey, accelerator_key, link_key, site_key
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays, demand_units
from cnbrain.placement.batch import RequestBatch
from cnbrain.placement.engine import PlacementEngine
from cnbrain.routing.paths import Blocked
from cnbrain.routing.router import NOTHING_BLOCKED, Route
from cnbrain.scheduling.backfill import PlanOption
from cnbrain.scheduling.resources import (
    CPU_M,
    MEM_MIB,
    STORAGE_GIB,
    Resources,
    accelerator_dimension,
)

RANK_CHUNK = 1000
"""Requests ranked by the engine in one batch (bounds the (requests x sites) matrices)."""


class CalendarKeys:
    """The integer calendar keys of a map's resources: site `i`'s dimension `d` is
    `i * dims + d` (`d`: 0 millicores, 1 MiB, 2 GiB, `3 + c` accelerators of model column
    `c`), link `j` is `sites * dims + j`."""

    CPU_M, MEM_MIB, STORAGE_GIB, ACCELERATORS = 0, 1, 2, 3

    def __init__(self, arrays: MapArrays) -> None:
        self.arrays = arrays
        self.dims: int = self.ACCELERATORS + int(arrays.cap_acc.shape[1])
        self._links_from: int = arrays.n_sites * self.dims

    def site(self, site: int, dimension: int) -> int:
        return site * self.dims + dimension

    def link(self, link: int) -> int:
        return self._links_from + link

    def link_of(self, key: int) -> int | None:
        """The link that `key` counts (`link`'s inverse); None for a site's key."""
        return key - self._links_from if key >= self._links_from else None

    def site_of(self, key: int) -> tuple[int, int]:
        """The (site, dimension) that a site's `key` counts (`site`'s inverse)."""
        site, dimension = divmod(key, self.dims)
        return site, dimension

    def capacities(self) -> dict[int, int]:
        """Every key with its whole capacity."""
        a = self.arrays
        out: dict[int, int] = {}
        for i in range(a.n_sites):
            out[self.site(i, self.CPU_M)] = int(a.cap_cpu_m[i])
            out[self.site(i, self.MEM_MIB)] = int(a.cap_mem_mib[i])
            out[self.site(i, self.STORAGE_GIB)] = int(a.cap_storage_gib[i])
            for column in range(a.cap_acc.shape[1]):
                out[self.site(i, self.ACCELERATORS + column)] = int(a.cap_acc[i, column])
        for j, mbps in enumerate(a.link_cap_mbps.tolist()):
            out[self.link(j)] = int(mbps)
        return out


class LedgerKeys:
    """The same numbering of a map's resources as `CalendarKeys`, given as the keys of the
    ledger's calendar (`cnbrain.ledger.keys`, as `ledger_store.calendar_of` builds it)."""

    CPU_M, MEM_MIB, STORAGE_GIB, ACCELERATORS = 0, 1, 2, 3

    def __init__(self, arrays: MapArrays) -> None:
        self.arrays = arrays
        self._models = {column: model for model, column in arrays.accelerator_column.items()}

    def site(self, site: int, dimension: int) -> ResourceKey:
        if dimension < self.ACCELERATORS:
            return site_key(site, SITE_COMPUTE[dimension])
        return accelerator_key(site, self._models[dimension - self.ACCELERATORS])

    def link(self, link: int) -> ResourceKey:
        return link_key(link)


def request_options(
    engine: PlacementEngine, requests: Sequence[PlacementRequest], *, top_n: int
) -> list[tuple[PlanOption[int], ...]]:
    """`ledger_options` over `CalendarKeys`."""
    return ledger_options(engine, requests, top_n=top_n, keys=CalendarKeys(engine.arrays))


class AccessRouter(Protocol):
    """Where the routes from an access node to sites come from: a `SegmentRouter` on a
    brain's copy of the map, or the segments their owners computed
    (`routing.composed.OwnerRoutes`)."""

    def routes(
        self,
        *,
        access_node: str,
        sites: Sequence[int],
        k: int,
        blocked: Blocked = NOTHING_BLOCKED,
        max_latency_ms: float = math.inf,
    ) -> list[list[Route]]: ...


def ledger_options(
    engine: PlacementEngine,
    requests: Sequence[PlacementRequest],
    *,
    top_n: int,
    keys: "CalendarKeys | LedgerKeys",
    avoid: Blocked = NOTHING_BLOCKED,
) -> list[tuple[PlanOption[Any], ...]]:
    """Per request, in order, up to `top_n` options, best first: the engine's ranking of the
    sites that pass its filters and could hold the request on the empty map, each with its
    best route (the links `avoid`, and those of less capacity than the request's bandwidth,
    avoided). An option holds the request's compute on the site and its bandwidth on every
    link of the route; a site with no route within the request's latency bound is left out.
    Its `bandwidth` is the same Mbps by link id (`Resources.bandwidth`)."""
    empty = Snapshot.empty(engine.arrays)
    build = _OptionBuilder(engine.arrays, keys, avoid)
    out: list[tuple[PlanOption[Any], ...]] = []
    for lo in range(0, len(requests), RANK_CHUNK):
        chunk = list(requests[lo : lo + RANK_CHUNK])
        ranked = engine.rank_sites_many(chunk, snapshot=empty, n=top_n)
        batch = RequestBatch.build(chunk, engine.arrays, engine.config.weight_matrix)
        for row, (sites, _) in enumerate(ranked):
            out.append(build(batch, row, [site for site, _ in sites], engine.router))
    return out


def ranked_sites(engine: PlacementEngine, request: PlacementRequest, *, top_n: int) -> list[int]:
    """The sites (indices, best first) that `ledger_options` gives `request` options on."""
    empty = Snapshot.empty(engine.arrays)
    ((sites, _),) = engine.rank_sites_many([request], snapshot=empty, n=top_n)
    return [site for site, _ in sites]


def site_options(
    engine: PlacementEngine,
    request: PlacementRequest,
    sites: Sequence[int],
    *,
    keys: "CalendarKeys | LedgerKeys",
    router: AccessRouter,
) -> tuple[PlanOption[Any], ...]:
    """`request`'s options on `sites` (`ranked_sites`), as `ledger_options` builds them, its
    route to each given by `router`."""
    batch = RequestBatch.build([request], engine.arrays, engine.config.weight_matrix)
    return _OptionBuilder(engine.arrays, keys, NOTHING_BLOCKED)(batch, 0, sites, router)


class _OptionBuilder:
    """Options of requests on their sites (`ledger_options`), what is alike among requests
    computed once: the links each bandwidth cannot cross, and each route's bandwidth by link
    id."""

    def __init__(
        self, arrays: MapArrays, keys: "CalendarKeys | LedgerKeys", avoid: Blocked
    ) -> None:
        self._arrays = arrays
        self._keys = keys
        self._avoid = avoid
        self._link_ids = [link.id for link in arrays.map.links]
        self._blocked: dict[int, Blocked] = {}
        self._bandwidth: dict[tuple[tuple[int, ...], int], Resources] = {}

    def __call__(
        self, batch: RequestBatch, row: int, sites: Sequence[int], router: AccessRouter
    ) -> tuple[PlanOption[Any], ...]:
        """The options of the request in `row` of `batch` on `sites`, routed by `router`."""
        keys = self._keys
        need = int(batch.need_mbps[row])
        routes = router.routes(
            access_node=batch.access_nodes[row],
            sites=sites,
            k=1,
            blocked=self._blocked_for(need),
            max_latency_ms=float(batch.max_latency_ms[row]),
        )
        compute = compute_amounts(batch, row, keys)
        options = []
        for site, site_routes in zip(sites, routes, strict=True):
            if not site_routes:
                continue
            demand = {keys.site(site, d): amount for d, amount in compute}
            held = Resources()
            if need > 0:
                links = site_routes[0].links
                for link in links:
                    key = keys.link(link)
                    demand[key] = demand.get(key, 0) + need
                if (links, need) not in self._bandwidth:
                    self._bandwidth[(links, need)] = _bandwidth(links, need, self._link_ids)
                held = self._bandwidth[(links, need)]
            options.append(PlanOption(self._arrays.map.sites[site].id, demand, held))
        return tuple(options)

    def _blocked_for(self, need: int) -> Blocked:
        found = self._blocked.get(need)
        if found is None:
            found = self._avoid
            if need > 0:
                found = found | frozenset(
                    np.flatnonzero(self._arrays.link_cap_mbps < need).tolist()
                )
            self._blocked[need] = found
        return found


def _bandwidth(links: Sequence[int], mbps: int, link_ids: Sequence[str]) -> Resources:
    """`mbps` on each of `links` (indices; a link twice holds it twice), by link id."""
    by_id: dict[str, int] = {}
    for link in links:
        by_id[link_ids[link]] = by_id.get(link_ids[link], 0) + mbps
    return Resources.bandwidth(by_id)


def compute_amounts(
    batch: RequestBatch, row: int, keys: "CalendarKeys | LedgerKeys"
) -> list[tuple[int, int]]:
    """The non-zero compute amounts of the request in `row` as (site dimension, amount)."""
    amounts = [
        (keys.CPU_M, int(batch.cpu_m[row])),
        (keys.MEM_MIB, int(batch.mem_mib[row])),
        (keys.STORAGE_GIB, int(batch.storage_gib[row])),
    ]
    if batch.acc_milli[row] > 0:
        amounts.append((keys.ACCELERATORS + int(batch.acc_column[row]), int(batch.acc_milli[row])))
    return [(d, amount) for d, amount in amounts if amount > 0]


def request_demand(request: PlacementRequest) -> Resources:
    """What `request` holds of a site's compute, as a resource vector in the ledger's units."""
    units = demand_units(request.resources)
    model = units.accelerator_model
    return Resources.of(
        cpu_m=units.cpu_m,
        mem_mib=units.mem_mib,
        storage_gib=units.storage_gib,
        accelerators={model: units.accelerator_milli} if model else None,
    )


def sites_capacity(arrays: MapArrays, sites: "np.ndarray | None" = None) -> Resources:
    """The whole capacity of the map's sites (those `sites`, a boolean mask, marks; all when
    None) as one resource vector."""
    keep = np.ones(arrays.n_sites, dtype=bool) if sites is None else sites
    return Resources.of(
        cpu_m=int(arrays.cap_cpu_m[keep].sum()),
        mem_mib=int(arrays.cap_mem_mib[keep].sum()),
        storage_gib=int(arrays.cap_storage_gib[keep].sum()),
        accelerators={
            model: int(arrays.cap_acc[keep, column].sum())
            for model, column in arrays.accelerator_column.items()
        },
    )


def free_now_on(
    calendar: Calendar[Any], keys: "CalendarKeys | LedgerKeys"
) -> Callable[[str], Resources]:
    """What a site (by id) has free at the calendar's now, as one resource vector: its
    compute under `keys`' numbering; a resource the calendar lacks has nothing free."""
    arrays = keys.arrays
    site_index = arrays.map.site_index
    now = calendar.now
    dimensions = [
        (CPU_M, keys.CPU_M),
        (MEM_MIB, keys.MEM_MIB),
        (STORAGE_GIB, keys.STORAGE_GIB),
        *(
            (accelerator_dimension(model), keys.ACCELERATORS + column)
            for model, column in arrays.accelerator_column.items()
        ),
    ]

    def free(site_id: str) -> Resources:
        i = site_index[site_id]
        amounts: dict[str, int] = {}
        for name, dimension in dimensions:
            key = keys.site(i, dimension)
            if key in calendar:
                amounts[name] = calendar.profile(key).free_at(now)
        return Resources(amounts)

    return free


def free_bandwidth_now_on(
    calendar: Calendar[Any], keys: "CalendarKeys | LedgerKeys"
) -> Callable[[str], int]:
    """What a link (by id) has free at the calendar's now, in Mbps, under `keys`' numbering;
    a link not on the map, or that the calendar lacks, has nothing free."""
    link_index = keys.arrays.link_index
    now = calendar.now

    def free(link_id: str) -> int:
        j = link_index.get(link_id)
        if j is None or keys.link(j) not in calendar:
            return 0
        return calendar.profile(keys.link(j)).free_at(now)

    return free
