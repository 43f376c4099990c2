"""Balance: half the site's highest resource utilisation once the request is placed, half
the utilisation of the path's busiest link. Before routes exist, link load is taken as none."""

import numpy as np

from cnbrain.domain.enums import Objective
from cnbrain.netmap.arrays import FloatArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.terms import OptionFacts


class BalanceScore:
    name = "balance"
    objective = Objective.BALANCE

    def term(self, state: CycleState, facts: OptionFacts) -> FloatArray:
        return np.asarray(0.5 * facts.site_utilisation + 0.5 * facts.link_utilisation)
