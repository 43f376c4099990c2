"""Compute price of the request at the site, over the request's reference cost."""

import numpy as np

from cnbrain.domain.enums import Objective
from cnbrain.netmap.arrays import FloatArray, IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.objective import compute_cost


class CostScore:
    name = "cost"
    objective = Objective.COST

    def score(self, state: CycleState, rows: IntArray, sites: IntArray) -> FloatArray:
        cost = compute_cost(state.batch, state.arrays, rows, sites)
        return np.nan_to_num(cost / state.refs.cost[rows], posinf=1e9)
