"""Sites that no path, even on an empty network, reaches within the latency bound."""

import numpy as np

from cnbrain.placement.cycle import CycleState
from cnbrain.placement.framework import BoolMatrix, Code


class LatencyBoundFilter:
    name = "latency_bound"
    code = Code.UNRESOLVABLE
    reason = "no path reaches the site within max_latency_ms"

    def filter(self, state: CycleState) -> BoolMatrix:
        access, table = state.latency_bounds()
        bound = state.batch.max_latency_ms
        out = np.ones((len(state.batch), state.arrays.n_sites), dtype=bool)
        bounded = np.isfinite(bound)
        for node in np.unique(access[bounded]).tolist():
            rows = np.flatnonzero(bounded & (access == node))
            out[rows] = table[node][None, :] <= bound[rows, None]
        return out
