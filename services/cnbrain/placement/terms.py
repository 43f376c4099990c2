"""What the objective is made of: the facts of (request, site, route) options, and the
weighted sum of the enabled score plugins' terms over them.

Each score plugin defines its term once, from `OptionFacts`; the solver's objective of an
option is the sum, over the enabled plugins, of the request's weight for the plugin's
objective times the plugin's term. Disabling a plugin removes its term from what every
strategy optimises.
"""

from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from cnbrain.netmap.arrays import FloatArray, IntArray
from cnbrain.placement.cache import CacheKey
from cnbrain.placement.framework import FloatMatrix
from cnbrain.placement.objective import compute_cost, energy, site_utilisation_after
from cnbrain.placement.weights import OBJECTIVE_INDEX

if TYPE_CHECKING:
    from cnbrain.placement.cycle import CycleState

BEST_LATENCY: CacheKey[tuple[IntArray, FloatMatrix]] = CacheKey("best_latency")


def best_latency(state: "CycleState") -> tuple[IntArray, FloatMatrix]:
    """Lowest possible path latency, ignoring bandwidth: (for each request row, the index of
    its access node; for each distinct access node, its latency to every site). Computed
    once per cycle."""

    def compute() -> tuple[IntArray, FloatMatrix]:
        nodes, index = np.unique(np.asarray(state.batch.access_nodes), return_inverse=True)
        table = np.stack([state.router.bounds.to_sites(str(node)) for node in nodes])
        return index.astype(np.int64), table

    return state.cache.get(BEST_LATENCY, compute)


class OptionFacts:
    """Facts of aligned options (request row, site, route): money, energy, latency, load.

    The route's facts are given; the site's are computed on first use against the cycle's
    working capacity. `best_case` stands for the best route a site could have: the lowest
    possible latency, no bandwidth cost, no link load.
    """

    def __init__(
        self,
        state: "CycleState",
        rows: IntArray,
        sites: IntArray,
        *,
        latency_ms: FloatArray | None,
        bandwidth_cost_cny: FloatArray,
        link_utilisation: FloatArray,
    ) -> None:
        self._state = state
        self.rows = rows
        self.sites = sites
        self._latency_ms = latency_ms
        self.bandwidth_cost_cny = bandwidth_cost_cny
        self.link_utilisation = link_utilisation

    @classmethod
    def best_case(cls, state: "CycleState", rows: IntArray, sites: IntArray) -> "OptionFacts":
        nothing = np.zeros(len(rows))
        return cls(
            state,
            rows,
            sites,
            latency_ms=None,
            bandwidth_cost_cny=nothing,
            link_utilisation=nothing,
        )

    @cached_property
    def latency_ms(self) -> FloatArray:
        """The route's latency; for `best_case`, the lowest possible (inf if unreachable)."""
        if self._latency_ms is not None:
            return self._latency_ms
        access, table = best_latency(self._state)
        return np.asarray(table[access[self.rows], self.sites], dtype=np.float64)

    @cached_property
    def compute_cost_cny(self) -> FloatArray:
        return compute_cost(self._state.batch, self._state.arrays, self.rows, self.sites)

    @cached_property
    def cost_cny(self) -> FloatArray:
        return np.asarray(self.compute_cost_cny + self.bandwidth_cost_cny, dtype=np.float64)

    @cached_property
    def _energy(self) -> tuple[FloatArray, FloatArray]:
        return energy(self._state.batch, self._state.arrays, self.rows, self.sites)

    @property
    def energy_kwh(self) -> FloatArray:
        return self._energy[0]

    @property
    def carbon_kg(self) -> FloatArray:
        return self._energy[1]

    @cached_property
    def site_utilisation(self) -> FloatArray:
        """The site's highest resource utilisation once the request is placed there."""
        s = self._state
        return site_utilisation_after(
            s.batch,
            s.arrays,
            s.free_cpu_m,
            s.free_mem_mib,
            s.free_storage_gib,
            s.free_acc,
            self.rows,
            self.sites,
        )


def weighted_terms(state: "CycleState", facts: OptionFacts) -> tuple[FloatMatrix, FloatArray]:
    """(each option's terms, one column per enabled score plugin in the cycle's
    `score_plugins` order; each option's objective: the weighted sum of those terms with
    the request's weights)."""
    plugins = state.score_plugins
    n = len(facts.rows)
    if not plugins:
        return np.zeros((n, 0)), np.zeros(n)
    terms = np.stack([plugin.term(state, facts) for plugin in plugins], axis=1)
    return terms, np.einsum("ij,ij->i", terms, plugin_weights(state)[facts.rows])


PLUGIN_WEIGHTS: CacheKey[FloatMatrix] = CacheKey("plugin_weights")


def plugin_weights(state: "CycleState") -> FloatMatrix:
    """(requests x enabled score plugins): each request's weight for each plugin's
    objective. Computed once per cycle."""

    def compute() -> FloatMatrix:
        columns = [OBJECTIVE_INDEX[plugin.objective] for plugin in state.score_plugins]
        return np.ascontiguousarray(state.batch.weights[:, columns])

    return state.cache.get(PLUGIN_WEIGHTS, compute)


def capped(values: FloatArray) -> FloatArray:
    """`values` with infinity (an unreachable site's latency, say) replaced by 1e9, so a
    weighted sum stays finite and a zero weight cancels it."""
    return np.where(values == np.inf, 1e9, values)
