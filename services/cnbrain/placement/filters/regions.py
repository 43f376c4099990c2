"""Sites outside the request's allowed provinces and regions, or inside denied ones."""

from cnbrain.netmap.arrays import IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.framework import BoolMatrix, Code


class RegionsFilter:
    name = "regions"
    code = Code.UNRESOLVABLE
    reason = "site's province or region is not allowed by the request"

    def filter(self, state: CycleState) -> BoolMatrix:
        return state.batch.allowed_province[:, state.arrays.site_province]

    def explain(self, state: CycleState, rejected: BoolMatrix, rows: IntArray) -> list[str]:
        """The request's allow and deny lists ("allowed: west; denied: BB")."""
        messages = []
        for row in rows.tolist():
            c = state.batch.requests[row].constraints
            lists = [("allowed", c.regions_allowed), ("denied", c.regions_denied)]
            messages.append("; ".join(f"{k}: {', '.join(v)}" for k, v in lists if v))
        return messages
