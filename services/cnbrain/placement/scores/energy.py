"""Energy (with PUE) and carbon of the request at the site, over their references."""

import numpy as np

from cnbrain.domain.enums import Objective
from cnbrain.netmap.arrays import FloatArray, IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.objective import energy


class EnergyScore:
    name = "energy"
    objective = Objective.ENERGY

    def score(self, state: CycleState, rows: IntArray, sites: IntArray) -> FloatArray:
        kwh, carbon = energy(state.batch, state.arrays, rows, sites)
        refs = state.refs
        return np.asarray(0.5 * kwh / refs.kwh[rows] + 0.5 * carbon / refs.carbon_kg[rows])
