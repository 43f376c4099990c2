"""Lowest possible path latency to the site, over the request's reference latency."""

import numpy as np

from cnbrain.domain.enums import Objective
from cnbrain.netmap.arrays import FloatArray, IntArray
from cnbrain.placement.cycle import CycleState


class LatencyScore:
    name = "latency"
    objective = Objective.LATENCY

    def score(self, state: CycleState, rows: IntArray, sites: IntArray) -> FloatArray:
        access, table = state.latency_bounds()
        return np.nan_to_num(table[access[rows], sites] / state.refs.latency_ms[rows], posinf=1e9)
