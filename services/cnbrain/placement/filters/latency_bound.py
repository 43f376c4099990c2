"""Sites that no path, even on an empty network, reaches within the latency bound."""

import math

import numpy as np

from cnbrain.netmap.arrays import IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.filters.closest import amount, closest
from cnbrain.placement.framework import BoolMatrix, Code
from cnbrain.placement.terms import best_latency


class LatencyBoundFilter:
    name = "latency_bound"
    code = Code.UNRESOLVABLE
    reason = "no path reaches the site within max_latency_ms"

    def filter(self, state: CycleState) -> BoolMatrix:
        access, table = best_latency(state)
        bound = state.batch.max_latency_ms[:, None]
        mask: BoolMatrix = (bound == np.inf) | (table[access] <= bound)
        return mask

    def explain(self, state: CycleState, rejected: BoolMatrix, rows: IntArray) -> list[str]:
        """The best possible path to the closest rejected site against the bound ("best path
        52.1 ms > bound 40 ms at XJ-hub")."""
        access, table = best_latency(state)
        bound, sites = state.batch.max_latency_ms, state.arrays.map.sites
        best, count = closest(rejected, -table[access[rows]], rows)
        messages = []
        for row, site, n in zip(rows.tolist(), best.tolist(), count.tolist(), strict=True):
            latency = float(table[access[row], site])
            where = f"at {sites[site].id}" if n == 1 else f"at the closest, {sites[site].id}"
            if math.isfinite(latency):
                limit = amount(float(bound[row]))
                messages.append(f"best path {latency:.1f} ms > bound {limit} ms {where}")
            else:
                messages.append(f"no path {where}")
        return messages
