"""Latency: the path's latency over the request's reference latency. Before routes exist,
the lowest possible path latency to the site stands for it."""

from cnbrain.domain.enums import Objective
from cnbrain.netmap.arrays import FloatArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.terms import OptionFacts, capped


class LatencyScore:
    name = "latency"
    objective = Objective.LATENCY

    def term(self, state: CycleState, facts: OptionFacts) -> FloatArray:
        return capped(facts.latency_ms / state.refs.latency_ms[facts.rows])
