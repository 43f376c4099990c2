"""Sites whose CPU architecture differs from the one the request needs."""

from cnbrain.placement.cycle import CycleState
from cnbrain.placement.framework import BoolMatrix, Code


class CpuArchFilter:
    name = "cpu_arch"
    code = Code.UNRESOLVABLE
    reason = "site's CPU architecture is not the requested one"

    def filter(self, state: CycleState) -> BoolMatrix:
        want = state.batch.arch[:, None]
        mask: BoolMatrix = (want < 0) | (state.arrays.site_arch[None, :] == want)
        return mask
