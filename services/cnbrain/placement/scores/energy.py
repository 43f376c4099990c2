"""Energy: half kWh (PUE included) over the reference kWh, half carbon over the reference
carbon. It depends on the site alone, so the estimate is the term."""

import numpy as np

from cnbrain.domain.enums import Objective
from cnbrain.netmap.arrays import FloatArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.terms import OptionFacts


class EnergyScore:
    name = "energy"
    objective = Objective.ENERGY

    def term(self, state: CycleState, facts: OptionFacts) -> FloatArray:
        refs, rows = state.refs, facts.rows
        return np.asarray(
            0.5 * facts.energy_kwh / refs.kwh[rows] + 0.5 * facts.carbon_kg / refs.carbon_kg[rows]
        )
