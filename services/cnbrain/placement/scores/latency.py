"""Latency: the path's latency over the request's reference latency. Before routes exist,
the lowest possible path latency to the site stands for it."""

import numpy as np

from cnbrain.domain.enums import Objective
from cnbrain.netmap.arrays import FloatArray, IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.terms import OptionFacts


class LatencyScore:
    name = "latency"
    objective = Objective.LATENCY

    def term(self, state: CycleState, facts: OptionFacts) -> FloatArray:
        return np.nan_to_num(facts.latency_ms / state.refs.latency_ms[facts.rows], posinf=1e9)

    def score(self, state: CycleState, rows: IntArray, sites: IntArray) -> FloatArray:
        return self.term(state, OptionFacts.best_case(state, rows, sites))
