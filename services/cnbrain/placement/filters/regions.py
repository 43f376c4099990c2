"""Sites outside the request's allowed provinces and regions, or inside denied ones."""

from cnbrain.placement.cycle import CycleState
from cnbrain.placement.framework import BoolMatrix, Code


class RegionsFilter:
    name = "regions"
    code = Code.UNRESOLVABLE
    reason = "site's province or region is not allowed by the request"

    def filter(self, state: CycleState) -> BoolMatrix:
        return state.batch.allowed_province[:, state.arrays.site_province]
