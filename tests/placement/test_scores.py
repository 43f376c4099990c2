"""Score plugins: normalised estimates of each objective term, lower is better."""

import numpy as np

from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.framework import ScorePlugin
from cnbrain.placement.registry import SCORES
from cnbrain.placement.scores.balance import BalanceScore
from cnbrain.placement.scores.cost import CostScore
from cnbrain.placement.scores.energy import EnergyScore
from cnbrain.placement.scores.latency import LatencyScore
from cnbrain.placement.terms import OptionFacts
from tests.tiny_map import cycle_state, request


def scores(cmap: ComputeNetworkMap, plugin: ScorePlugin, **overrides: object) -> dict[str, float]:
    state = cycle_state(cmap, [request(**overrides)])
    sites = np.arange(len(cmap.sites))
    facts = OptionFacts.best_case(state, np.zeros(len(sites), dtype=np.int64), sites)
    values = plugin.term(state, facts)
    return {cmap.sites[i].id: float(v) for i, v in enumerate(values)}


def test_registry_names_match_objectives() -> None:
    for name, factory in SCORES.items():
        assert factory().objective.value == name


def test_cost_is_compute_price_over_the_reference(tiny_map: ComputeNetworkMap) -> None:
    values = scores(
        tiny_map, CostScore(), resources={"cpu": 10, "memory_gib": 100}, duration_hours=3
    )
    # AA-dc: 3 h x (10 cores x 0.12 + 100 GiB x 0.005) = 5.1 CNY; BB-dc: 3 x (0.3 + 0.5) = 2.4 CNY.
    assert np.isclose(values["AA-dc"] / values["BB-dc"], 5.1 / 2.4)
    assert min(values, key=values.__getitem__) == "AA-idle"


def test_cost_counts_accelerators(tiny_map: ComputeNetworkMap) -> None:
    gpu = {"cpu": 1, "memory_gib": 1, "accelerator": {"model": "A100", "count": 2}}
    values = scores(tiny_map, CostScore(), resources=gpu)
    assert values["BB-dc"] < values["CC-hub"] < values["BB-hub"] < values["AA-dc"]


def test_energy_prefers_low_pue_and_clean_power(tiny_map: ComputeNetworkMap) -> None:
    values = scores(tiny_map, EnergyScore(), resources={"cpu": 16, "memory_gib": 64})
    assert min(values, key=values.__getitem__) == "CC-hub"
    assert max(values, key=values.__getitem__) == "AA-idle"


def test_latency_is_the_lower_bound_over_the_reference(tiny_map: ComputeNetworkMap) -> None:
    values = scores(tiny_map, LatencyScore(), constraints={"max_latency_ms": 10})
    assert np.isclose(values["AA-dc"], 0.8 / 10)
    assert np.isclose(values["BB-hub"], 3.0 / 10)
    assert np.isclose(values["CC-hub"], (0.3 + 5.0 + 0.7) / 10)


def test_balance_prefers_the_emptier_site(tiny_map: ComputeNetworkMap) -> None:
    values = scores(tiny_map, BalanceScore(), resources={"cpu": 32, "memory_gib": 64})
    assert np.isclose(values["AA-idle"], 0.5 * 1.0)
    assert np.isclose(values["CC-hub"], 0.5 * 32 / 1024)
    assert values["CC-hub"] < values["BB-hub"] < values["BB-dc"] < values["AA-dc"]
