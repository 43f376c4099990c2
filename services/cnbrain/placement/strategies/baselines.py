"""Site orders of the sequential baselines."""

import numpy as np

from cnbrain.netmap.arrays import IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.objective import site_utilisation_after


def first_fit(state: CycleState, row: int, sites: IntArray) -> IntArray:
    """Map order."""
    return sites


def greedy_score(state: CycleState, row: int, sites: IntArray) -> IntArray:
    """Best weighted score first (the same score the solver's Top-N uses)."""
    return sites[np.argsort(state.scores.of_sites(row, sites), kind="stable")]


def _utilisation(state: CycleState, row: int, sites: IntArray) -> np.ndarray:
    rows = np.full(len(sites), row)
    return site_utilisation_after(
        state.batch,
        state.arrays,
        state.free_cpu_m,
        state.free_mem_mib,
        state.free_storage_gib,
        state.free_acc,
        rows,
        sites,
    )


def least_allocated(state: CycleState, row: int, sites: IntArray) -> IntArray:
    """Lowest utilisation after placement first: spreads load."""
    return sites[np.argsort(_utilisation(state, row, sites), kind="stable")]


def most_allocated(state: CycleState, row: int, sites: IntArray) -> IntArray:
    """Highest utilisation after placement first: packs load."""
    return sites[np.argsort(-_utilisation(state, row, sites), kind="stable")]


class RandomOrder:
    """A seeded random order, reproducible for a seed and a sequence of calls."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def __call__(self, state: CycleState, row: int, sites: IntArray) -> IntArray:
        return self._rng.permutation(sites)
