"""Idle (socially owned) compute serves only requests from its own province."""

from cnbrain.domain.enums import SiteKind
from cnbrain.netmap.arrays import SITE_KIND_CODES, IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.framework import BoolMatrix, Code


class IdleInProvinceFilter:
    name = "idle_in_province"
    code = Code.UNRESOLVABLE
    reason = "idle-compute sites serve only requests from their own province"

    def filter(self, state: CycleState) -> BoolMatrix:
        a = state.arrays
        idle = a.site_kind == SITE_KIND_CODES[SiteKind.IDLE]
        same = a.site_province[None, :] == state.batch.source_province[:, None]
        mask: BoolMatrix = ~idle[None, :] | same
        return mask

    def explain(self, state: CycleState, rejected: BoolMatrix, rows: IntArray) -> list[str]:
        """The request's source province ("from ZJ: idle sites of other provinces")."""
        requests = state.batch.requests
        messages = [
            f"from {requests[row].source_province}: idle sites of other provinces"
            for row in rows.tolist()
        ]
        return messages
