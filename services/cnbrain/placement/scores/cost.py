"""Cost: compute price x duration plus the path's bandwidth cost, over the request's
reference cost. Before routes exist, the bandwidth cost is taken as none."""

from cnbrain.domain.enums import Objective
from cnbrain.netmap.arrays import FloatArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.terms import OptionFacts, capped


class CostScore:
    name = "cost"
    objective = Objective.COST

    def term(self, state: CycleState, facts: OptionFacts) -> FloatArray:
        return capped(facts.cost_cny / state.refs.cost[facts.rows])
