"""Sites that no path, even on an empty network, reaches within the latency bound."""

from cnbrain.placement.cycle import CycleState
from cnbrain.placement.framework import BoolMatrix, Code


class LatencyBoundFilter:
    name = "latency_bound"
    code = Code.UNRESOLVABLE
    reason = "no path reaches the site within max_latency_ms"

    def filter(self, state: CycleState) -> BoolMatrix:
        return state.latency_bounds() <= state.batch.max_latency_ms[:, None]
