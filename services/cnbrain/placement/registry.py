"""Plain name -> factory registries of filter plugins, score plugins, selection policies and
strategies."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from cnbrain.placement.filters.accelerator_model import AcceleratorModelFilter
from cnbrain.placement.filters.capacity import CapacityFilter
from cnbrain.placement.filters.cpu_arch import CpuArchFilter
from cnbrain.placement.filters.hub_across_provinces import HubAcrossProvincesFilter
from cnbrain.placement.filters.idle_in_province import IdleInProvinceFilter
from cnbrain.placement.filters.interconnect import InterconnectFilter
from cnbrain.placement.filters.labels import LabelsFilter
from cnbrain.placement.filters.latency_bound import LatencyBoundFilter
from cnbrain.placement.filters.node_pools import NodePoolsFilter
from cnbrain.placement.filters.node_shape import NodeShapeFilter
from cnbrain.placement.filters.regions import RegionsFilter
from cnbrain.placement.framework import FilterPlugin, ScorePlugin, SelectionPolicy, Strategy
from cnbrain.placement.scores.balance import BalanceScore
from cnbrain.placement.scores.cost import CostScore
from cnbrain.placement.scores.energy import EnergyScore
from cnbrain.placement.scores.latency import LatencyScore
from cnbrain.placement.selection import LocalFirst, Nationwide
from cnbrain.placement.solver import SolverSettings
from cnbrain.placement.strategies import baselines
from cnbrain.placement.strategies.sequential import SequentialStrategy
from cnbrain.placement.strategies.solver import SolverStrategy
from cnbrain.placement.weights import WeightMatrix

FILTERS: Mapping[str, Callable[[], FilterPlugin]] = MappingProxyType(
    {
        "regions": RegionsFilter,
        "idle_in_province": IdleInProvinceFilter,
        "hub_across_provinces": HubAcrossProvincesFilter,
        "cpu_arch": CpuArchFilter,
        "interconnect": InterconnectFilter,
        "labels": LabelsFilter,
        "accelerator_model": AcceleratorModelFilter,
        "latency_bound": LatencyBoundFilter,
        "capacity": CapacityFilter,
        "node_shape": NodeShapeFilter,
        "node_pools": NodePoolsFilter,
    }
)

SCORES: Mapping[str, Callable[[], ScorePlugin]] = MappingProxyType(
    {"cost": CostScore, "latency": LatencyScore, "energy": EnergyScore, "balance": BalanceScore}
)

SELECTIONS: Mapping[str, Callable[[], SelectionPolicy]] = MappingProxyType(
    {"local-first": LocalFirst, "nationwide": Nationwide}
)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Operator settings of the placement engine.

    `scores` are the enabled score plugins: the objective every strategy optimises is the
    weighted sum of their terms. `selection` names the selection policy (`SELECTIONS`)."""

    filters: tuple[str, ...] = tuple(FILTERS)
    scores: tuple[str, ...] = tuple(SCORES)
    selection: str = "local-first"
    top_n: int = 8
    k_paths: int = 3
    solver: SolverSettings = field(default_factory=SolverSettings)
    exact_solver: SolverSettings = field(
        default_factory=lambda: SolverSettings(time_limit_s=30.0, wall_limit_s=120.0)
    )
    batch_chunk: int = 50
    seed: int = 0
    weight_matrix: WeightMatrix = field(default_factory=WeightMatrix)


DEFAULT_STRATEGY = "topn-cpsat"

STRATEGIES: Mapping[str, Callable[[EngineConfig], Strategy]] = MappingProxyType(
    {
        "topn-cpsat": lambda c: SolverStrategy(
            name="topn-cpsat", top_n=c.top_n, settings=c.solver, chunk=c.batch_chunk
        ),
        "exact": lambda c: SolverStrategy(
            name="exact", top_n=None, settings=c.exact_solver, chunk=c.batch_chunk
        ),
        "greedy": lambda c: SequentialStrategy(name="greedy", order=baselines.greedy_score),
        "first-fit": lambda c: SequentialStrategy(name="first-fit", order=baselines.first_fit),
        "least-allocated": lambda c: SequentialStrategy(
            name="least-allocated", order=baselines.least_allocated
        ),
        "most-allocated": lambda c: SequentialStrategy(
            name="most-allocated", order=baselines.most_allocated
        ),
        "random-feasible": lambda c: SequentialStrategy(
            name="random-feasible", order=baselines.RandomOrder(c.seed)
        ),
    }
)
