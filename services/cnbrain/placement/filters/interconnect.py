"""Sites whose interconnect is weaker than the request's (ethernet < roce < ib)."""

from cnbrain.placement.cycle import CycleState
from cnbrain.placement.framework import BoolMatrix, Code


class InterconnectFilter:
    name = "interconnect"
    code = Code.UNRESOLVABLE
    reason = "site's interconnect is weaker than the requested one"

    def filter(self, state: CycleState) -> BoolMatrix:
        return state.arrays.site_interconnect[None, :] >= state.batch.interconnect_rank[:, None]
