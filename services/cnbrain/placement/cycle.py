"""Per-cycle state: the batch, its snapshot, working capacity and the options it builds."""

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType

import numpy as np
import numpy.typing as npt

from cnbrain.ledger.nodes import PoolSummary, fits_on, take_on
from cnbrain.ledger.snapshot import Snapshot, all_free, site_pools, suited_sites
from cnbrain.netmap.arrays import FloatArray, IntArray, MapArrays
from cnbrain.placement.batch import RequestBatch
from cnbrain.placement.cache import CycleCache
from cnbrain.placement.framework import BoolMatrix, FloatMatrix, ScorePlugin
from cnbrain.placement.objective import References
from cnbrain.placement.scoring import PairScores
from cnbrain.placement.terms import OptionFacts, weighted_terms
from cnbrain.routing.paths import Blocked
from cnbrain.routing.router import NOTHING_BLOCKED, Route, RouteSource


@dataclass(frozen=True, slots=True)
class RowInsight:
    """What a strategy looked at for one request: (site, score, best objective or None)."""

    candidates: tuple[tuple[int, float, float | None], ...]
    solver_status: str
    optimal: bool


@dataclass(frozen=True, slots=True)
class Option:
    """One way to serve request `row`: a site and a route, with its metrics and objective."""

    row: int
    site: int
    route: Route
    cost_cny: float
    energy_kwh: float
    carbon_kg: float
    site_utilisation: float
    link_utilisation: float
    terms: tuple[float, ...]
    """The enabled score plugins' normalised terms, in the cycle's `score_plugins` order."""
    objective: float
    """The weighted sum of `terms`."""


class Timed:
    """Adds the wall time of a `with` block, in ms, to `timings[step]`."""

    __slots__ = ("start", "step", "timings")

    def __init__(self, timings: dict[str, float], step: str) -> None:
        self.timings = timings
        self.step = step
        self.start = 0.0

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        elapsed = (time.perf_counter() - self.start) * 1000
        self.timings[self.step] = self.timings.get(self.step, 0.0) + elapsed


class CycleState:
    """Everything one placement cycle shares.

    Working arrays start as the snapshot's free capacity, and working node pools as its
    summaries; `take` subtracts an option from them, so strategies that choose one request
    after another see what earlier choices used.
    An option's objective is the weighted sum of the terms of `score_plugins` (the enabled
    ones), named in `term_names`. `cache` holds what plugins derive once per cycle.
    """

    def __init__(
        self,
        *,
        batch: RequestBatch,
        snapshot: Snapshot,
        router: RouteSource,
        k_paths: int,
        score_plugins: Sequence[ScorePlugin],
    ) -> None:
        self.batch = batch
        self.snapshot = snapshot
        self.arrays: MapArrays = snapshot.arrays
        self.router = router
        self.k_paths = k_paths
        self.score_plugins = tuple(score_plugins)
        self.term_names = tuple(plugin.objective.value for plugin in self.score_plugins)
        self.cache = CycleCache()
        self.refs = References.of(batch, self.arrays)
        self.free_cpu_m = snapshot.free_cpu_m.copy()
        self.free_mem_mib = snapshot.free_mem_mib.copy()
        self.free_storage_gib = snapshot.free_storage_gib.copy()
        self.free_acc = snapshot.free_acc.copy()
        self.residual_mbps = snapshot.residual_mbps.copy()
        self.pools = site_pools(self.arrays)
        self.nodes: dict[int, tuple[PoolSummary, ...]] = dict(snapshot.nodes)
        self.node_suits: BoolMatrix = np.stack(
            [suited_sites(self.arrays, gang) for gang in batch.gang_kinds]
        )
        """(gang kinds x sites): has the site no node pools, or one whose shape and size can
        hold the kind's nodes (`suited_sites`)?"""
        self._node_fit = self.node_suits.copy()
        """(gang kinds x sites): does a node pool of the site have the kind's nodes free?
        Valid where `_node_known` is True; the rest is worked out when asked."""
        self._node_known = np.ones_like(self._node_fit)
        untouched = all_free(self.arrays)
        for site, summaries in self.nodes.items():
            if summaries is not untouched.get(site):
                self._node_known[:, site] = False
        self.scores = PairScores.empty(len(batch))
        self.timings_ms: dict[str, float] = {}
        self.insights: dict[int, RowInsight] = {}
        self._blocked: dict[int, Blocked] = {}

    def timed(self, step: str) -> "Timed":
        """A `with` block whose wall time is added to `timings_ms[step]`."""
        return Timed(self.timings_ms, step)

    def fits(self, rows: IntArray, sites: IntArray) -> npt.NDArray[np.bool_]:
        """For aligned (row, site) pairs: does the site's working capacity take the request,
        and, on a site with node pools, does one of them have the request's nodes free?"""
        b = self.batch
        ok = (
            (self.free_cpu_m[sites] >= b.cpu_m[rows])
            & (self.free_mem_mib[sites] >= b.mem_mib[rows])
            & (self.free_storage_gib[sites] >= b.storage_gib[rows])
        )
        wants = b.acc_milli[rows] > 0
        if wants.any():
            acc = np.zeros(len(rows), dtype=bool)
            columns = b.acc_column[rows[wants]]
            if self.free_acc.shape[1]:
                free = self.free_acc[sites[wants], np.maximum(columns, 0)]
                acc[wants] = (columns >= 0) & (free >= b.acc_milli[rows[wants]])
            ok &= ~wants | acc
        if self.nodes:
            kinds = b.gang_kind[rows]
            self._know(kinds, sites)
            ok &= self._node_fit[kinds, sites]
        return np.asarray(ok, dtype=bool)

    def node_fit(self) -> BoolMatrix:
        """(requests x sites): does a node pool of the site (with its working summary) have
        the request's nodes free? True on a site without pools; False on one none of whose
        pools could ever hold them."""
        n_kinds, n_sites = self._node_fit.shape
        self._know(np.repeat(np.arange(n_kinds), n_sites), np.tile(np.arange(n_sites), n_kinds))
        fit: BoolMatrix = self._node_fit[self.batch.gang_kind]
        return fit

    def _know(self, kinds: IntArray, sites: IntArray) -> None:
        """Work out `_node_fit` of the aligned (kind, site) pairs not known yet."""
        unknown = ~self._node_known[kinds, sites]
        if not unknown.any():
            return
        gangs = self.batch.gang_kinds
        for k, site in set(zip(kinds[unknown].tolist(), sites[unknown].tolist(), strict=True)):
            pools, summaries = self.pools[site], self.nodes[site]
            self._node_fit[k, site] = fits_on(pools, summaries, gangs[k])
            self._node_known[k, site] = True

    def options(
        self, candidates: Mapping[int, IntArray], *, k: int | None = None
    ) -> dict[int, list[Option]]:
        """For each request row, every (site, route) option over its candidate sites that fits
        working capacity, with up to k routes per site (default: the cycle's k)."""
        out: dict[int, list[Option]] = {row: [] for row in candidates}
        if not candidates:
            return out
        rows, sites, kept_per_row = self._fitting_pairs(candidates)
        pair_of_option, routes = self._routes(candidates, sites, kept_per_row, k or self.k_paths)
        if not routes:
            return out
        pair = np.asarray(pair_of_option, dtype=np.int64)
        o_rows, o_sites = rows[pair], sites[pair]
        link_util, bw_cost = self._route_loads(o_rows, routes)
        facts = OptionFacts.of_routes(
            self,
            o_rows,
            o_sites,
            latency_ms=np.asarray([r.latency_ms for r in routes]),
            bandwidth_cost_cny=bw_cost,
            link_utilisation=link_util,
        )
        terms, objective = weighted_terms(self, facts)
        _add_options(out, routes, facts, terms, objective)
        return out

    def _fitting_pairs(
        self, candidates: Mapping[int, IntArray]
    ) -> tuple[IntArray, IntArray, list[int]]:
        """The (row, site) pairs of `candidates` that fit working capacity, as aligned arrays
        grouped by row in the order of `candidates`, and how many pairs each row kept (one
        count per row of `candidates`, in that order, zeros included)."""
        rows = np.concatenate(
            [np.full(len(s), row, dtype=np.int64) for row, s in candidates.items()]
        )
        sites = np.concatenate([np.asarray(s, dtype=np.int64) for s in candidates.values()])
        keep = self.fits(rows, sites)
        group = np.repeat(np.arange(len(candidates)), [len(s) for s in candidates.values()])
        kept_per_row = np.bincount(group[keep], minlength=len(candidates))
        return rows[keep], sites[keep], kept_per_row.tolist()

    def _routes(
        self,
        candidates: Mapping[int, IntArray],
        sites: IntArray,
        kept_per_row: list[int],
        k: int,
    ) -> tuple[list[int], list[Route]]:
        """Up to k routes from each row's access node to each of its kept `sites` (as made by
        `_fitting_pairs`), over links with room for its bandwidth and within its latency
        bound; and, aligned with the routes, the index of the pair each route serves."""
        b = self.batch
        pair_of_option: list[int] = []
        routes: list[Route] = []
        start = 0
        for row, kept in zip(candidates, kept_per_row, strict=True):
            if not kept:
                continue
            per_site = self.router.routes(
                access_node=b.access_nodes[row],
                sites=sites[start : start + kept].tolist(),
                k=k,
                blocked=self.blocked(int(b.need_mbps[row])),
                max_latency_ms=float(b.max_latency_ms[row]),
            )
            for offset, site_routes in enumerate(per_site):
                for route in site_routes:
                    pair_of_option.append(start + offset)
                    routes.append(route)
            start += kept
        return pair_of_option, routes

    def _route_loads(
        self, rows: IntArray, routes: Sequence[Route]
    ) -> tuple[FloatArray, FloatArray]:
        """For non-empty aligned (row, route) pairs: the utilisation of the route's busiest link
        once the row's bandwidth is added to working load, and the bandwidth's cost over the
        row's duration."""
        b, a = self.batch, self.arrays
        lengths = np.asarray([len(r.links) for r in routes], dtype=np.int64)
        links = np.concatenate([r.link_array for r in routes])
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        need = np.repeat(b.need_mbps[rows], lengths)
        cap = a.link_cap_mbps[links]
        link_util = np.maximum.reduceat((cap - self.residual_mbps[links] + need) / cap, starts)
        bw_cost = (
            b.need_mbps[rows]
            / 1000
            * b.duration_h[rows]
            * np.add.reduceat(a.link_cost[links], starts)
        )
        return link_util, bw_cost

    def blocked(self, need_mbps: int) -> Blocked:
        """Links whose working residual is below `need_mbps`."""
        if need_mbps <= 0:
            return NOTHING_BLOCKED
        blocked = self._blocked.get(need_mbps)
        if blocked is None:
            blocked = frozenset(np.flatnonzero(self.residual_mbps < need_mbps).tolist())
            self._blocked[need_mbps] = blocked
        return blocked

    def take(self, option: Option) -> None:
        """Subtract `option` from the working arrays."""
        b, row, site = self.batch, option.row, option.site
        self.free_cpu_m[site] -= b.cpu_m[row]
        self.free_mem_mib[site] -= b.mem_mib[row]
        self.free_storage_gib[site] -= b.storage_gib[row]
        if b.acc_milli[row] > 0:
            self.free_acc[site, b.acc_column[row]] -= b.acc_milli[row]
        if site in self.nodes:
            taken = take_on(self.pools[site], self.nodes[site], b.gangs[row])
            if taken is not None:
                self.nodes[site] = taken
                self._node_known[:, site] = False
        if option.route.links and b.need_mbps[row] > 0:
            self.residual_mbps[option.route.link_array] -= b.need_mbps[row]
            self._blocked.clear()


def _add_options(
    out: dict[int, list[Option]],
    routes: Sequence[Route],
    facts: OptionFacts,
    terms: FloatMatrix,
    objective: FloatArray,
) -> None:
    """Append to `out[row]` one Option per route, in route order, from the facts, terms and
    objectives aligned with `routes` (converted to Python numbers once, not per option)."""
    row_l, site_l, cost_l = facts.rows.tolist(), facts.sites.tolist(), facts.cost_cny.tolist()
    kwh_l, carbon_l = facts.energy_kwh.tolist(), facts.carbon_kg.tolist()
    site_util_l, link_util_l = facts.site_utilisation.tolist(), facts.link_utilisation.tolist()
    terms_l, objective_l = terms.tolist(), objective.tolist()
    for n, route in enumerate(routes):
        out[row_l[n]].append(
            Option(
                row=row_l[n],
                site=site_l[n],
                route=route,
                cost_cny=cost_l[n],
                energy_kwh=kwh_l[n],
                carbon_kg=carbon_l[n],
                site_utilisation=site_util_l[n],
                link_utilisation=link_util_l[n],
                terms=tuple(terms_l[n]),
                objective=objective_l[n],
            )
        )
