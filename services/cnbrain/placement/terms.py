"""What the objective is made of: the facts of (request, site, route) options, and the
weighted sum of the enabled score plugins' terms over them.

Each score plugin defines its term once, from `OptionFacts`; the solver's objective of an
option is the sum, over the enabled plugins, of the request's weight for the plugin's
objective times the plugin's term. Disabling a plugin removes its term from what every
strategy optimises. Before routes exist, the same sum over `OptionFacts.best_case` (the
best route a site could have) is the estimate that ranks the sites.
"""

from dataclasses import dataclass
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
PLUGIN_WEIGHTS: CacheKey[FloatMatrix] = CacheKey("plugin_weights")


def best_latency(state: "CycleState") -> tuple[IntArray, FloatMatrix]:
    """Lowest possible path latency, ignoring bandwidth: (for each request row, the index of
    its access node; for each distinct access node, its latency to every site). Computed
    once per cycle."""

    def compute() -> tuple[IntArray, FloatMatrix]:
        nodes = {node: i for i, node in enumerate(dict.fromkeys(state.batch.access_nodes))}
        index = np.asarray([nodes[node] for node in state.batch.access_nodes], dtype=np.int64)
        table = np.stack([state.router.bounds.to_sites(node) for node in nodes])
        return index, table

    return state.cache.get(BEST_LATENCY, compute)


@dataclass(frozen=True, slots=True, eq=False)
class OptionFacts:
    """Facts of aligned options (request row, site, route): money, energy, latency, load.

    The site's facts are taken against the cycle's working capacity when the facts are
    made. `best_case` stands for the best route a site could have: the lowest possible
    latency (inf if unreachable), no bandwidth cost, no link load.
    """

    rows: IntArray
    sites: IntArray
    latency_ms: FloatArray
    cost_cny: FloatArray
    """Compute price x duration plus the route's bandwidth cost."""
    energy_kwh: FloatArray
    carbon_kg: FloatArray
    site_utilisation: FloatArray
    """The site's highest resource utilisation once the request is placed there."""
    link_utilisation: FloatArray
    """The utilisation of the route's busiest link once the request is placed."""

    @classmethod
    def of_routes(
        cls,
        state: "CycleState",
        rows: IntArray,
        sites: IntArray,
        *,
        latency_ms: FloatArray,
        bandwidth_cost_cny: FloatArray,
        link_utilisation: FloatArray,
    ) -> "OptionFacts":
        b, a = state.batch, state.arrays
        kwh, carbon = energy(b, a, rows, sites)
        return cls(
            rows=rows,
            sites=sites,
            latency_ms=latency_ms,
            cost_cny=compute_cost(b, a, rows, sites) + bandwidth_cost_cny,
            energy_kwh=kwh,
            carbon_kg=carbon,
            site_utilisation=site_utilisation_after(
                b,
                a,
                state.free_cpu_m,
                state.free_mem_mib,
                state.free_storage_gib,
                state.free_acc,
                rows,
                sites,
            ),
            link_utilisation=link_utilisation,
        )

    @classmethod
    def best_case(cls, state: "CycleState", rows: IntArray, sites: IntArray) -> "OptionFacts":
        access, table = best_latency(state)
        nothing = np.zeros(len(rows))
        return cls.of_routes(
            state,
            rows,
            sites,
            latency_ms=np.asarray(table[access[rows], sites], dtype=np.float64),
            bandwidth_cost_cny=nothing,
            link_utilisation=nothing,
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


def estimates(state: "CycleState", rows: IntArray, sites: IntArray) -> FloatArray:
    """The weighted sum of the enabled plugins' terms for aligned (row, site) pairs at each
    site's best route (`OptionFacts.best_case`): the score that ranks sites before routes."""
    facts = OptionFacts.best_case(state, rows, sites)
    weights = state.batch.weights
    total = np.zeros(len(rows))
    for plugin in state.score_plugins:
        total += weights[rows, OBJECTIVE_INDEX[plugin.objective]] * plugin.term(state, facts)
    return total


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
