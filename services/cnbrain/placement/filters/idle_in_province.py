"""Idle (socially owned) compute serves only requests from its own province."""

import numpy as np

from cnbrain.domain.enums import SiteKind
from cnbrain.netmap.arrays import SITE_KIND_CODES
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.filters.closest import per_row
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

    def explain(self, state: CycleState, rejected: BoolMatrix) -> list[str]:
        """The request's source province ("from ZJ: idle sites of other provinces")."""
        rows = np.flatnonzero(rejected.any(axis=1))
        requests = state.batch.requests
        messages = [
            f"from {requests[row].source_province}: idle sites of other provinces"
            for row in rows.tolist()
        ]
        return per_row(len(state.batch), rows, messages)
