"""The objective the solver optimises is the weighted sum of the enabled score plugins'
terms: disabling a plugin changes what is chosen; each plugin's estimate bounds its term."""

from typing import Any

import numpy as np
import pytest

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.files import parse_map_document
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.registry import SCORES, EngineConfig
from cnbrain.placement.terms import OptionFacts
from tests.tiny_map import cycle_state, request, tiny_map_raw

GREEN_OR_CHEAP = {"cost": 1, "latency": 0, "energy": 1, "balance": 0}


def cheap_and_dirty_map() -> ComputeNetworkMap:
    """The tiny map with BB-hub made the cheapest site and the least green one: for a CPU
    request from BB that searches the whole country, cost picks BB-hub, energy CC-hub."""
    raw: dict[str, Any] = tiny_map_raw()
    hub = next(s for s in raw["sites"] if s["id"] == "BB-hub")
    hub["prices"]["cpu_core_hour"] = 0.01
    hub["pue"], hub["carbon_g_per_kwh"] = 1.7, 650
    return ComputeNetworkMap.from_document(parse_map_document(raw))


def place(cmap: ComputeNetworkMap, scores: tuple[str, ...], policy: str) -> Decision:
    engine = PlacementEngine(cmap, config=EngineConfig(scores=scores))
    return engine.place(
        request(source_province="BB", national_optimum=True, objective=GREEN_OR_CHEAP),
        policy=policy,
        reserve=False,
    )


@pytest.mark.parametrize("policy", ["topn-cpsat", "exact"])
def test_disabling_the_energy_plugin_changes_what_the_solver_picks(policy: str) -> None:
    cmap = cheap_and_dirty_map()
    everything = tuple(SCORES)
    without_energy = tuple(name for name in everything if name != "energy")
    assert place(cmap, everything, policy).site == "CC-hub"
    cheap = place(cmap, without_energy, policy)
    assert cheap.status is DecisionStatus.PLACED and cheap.site == "BB-hub"
    assert cheap.outcome is not None
    assert set(cheap.outcome.terms) == set(cheap.outcome.weights) == set(without_energy)
    weighted = sum(cheap.outcome.terms[n] * cheap.outcome.weights[n] for n in without_energy)
    assert cheap.outcome.objective == pytest.approx(weighted, abs=1e-6)
    assert place(cmap, everything, policy).site == "CC-hub"


def test_each_estimate_is_its_term_at_the_best_route(tiny_map: ComputeNetworkMap) -> None:
    """A plugin's estimate (its term at the best route) never exceeds its term on a real
    route; energy does not depend on the route, so there the two are equal."""
    state = cycle_state(
        tiny_map, [request(national_optimum=True, constraints={"min_bandwidth_gbps": 5})]
    )
    sites = np.asarray([0, 1, 2, 4])  # every site but BB-dc, which AA may not use
    options = state.options({0: sites})[0]
    assert {o.site for o in options} == set(sites.tolist())
    rows = np.zeros(len(options), dtype=np.int64)
    at = np.asarray([o.site for o in options])
    best = OptionFacts.best_case(state, rows, at)
    for column, plugin in enumerate(state.score_plugins):
        estimate = plugin.term(state, best)
        term = np.asarray([o.terms[column] for o in options])
        if plugin.name == "energy":
            np.testing.assert_allclose(estimate, term)
        else:
            assert np.all(estimate <= term + 1e-12), plugin.name
            assert np.any(estimate < term), plugin.name
