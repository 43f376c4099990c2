"""Sites whose CPU architecture differs from the one the request needs."""

from cnbrain.netmap.arrays import IntArray
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

    def explain(self, state: CycleState, rejected: BoolMatrix, rows: IntArray) -> list[str]:
        """The architecture the request wants ("wants aarch64")."""
        requests = state.batch.requests
        messages = [f"wants {requests[row].constraints.cpu_arch}" for row in rows.tolist()]
        return messages
