"""Sites whose interconnect is weaker than the request's (ethernet < roce < ib)."""

import numpy as np

from cnbrain.domain.enums import Interconnect
from cnbrain.netmap.arrays import IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.filters.closest import closest
from cnbrain.placement.framework import BoolMatrix, Code

BY_RANK = tuple(sorted(Interconnect, key=lambda i: i.rank))


class InterconnectFilter:
    name = "interconnect"
    code = Code.UNRESOLVABLE
    reason = "site's interconnect is weaker than the requested one"

    def filter(self, state: CycleState) -> BoolMatrix:
        return state.arrays.site_interconnect[None, :] >= state.batch.interconnect_rank[:, None]

    def explain(self, state: CycleState, rejected: BoolMatrix, rows: IntArray) -> list[str]:
        """The interconnect the request wants and the strongest among the rejected sites
        ("wants ib, at best roce at XJ-hub")."""
        ranks = state.arrays.site_interconnect
        best, _ = closest(rejected, ranks.astype(np.float64)[None, :], rows)
        sites, requests = state.arrays.map.sites, state.batch.requests
        messages = [
            f"wants {requests[row].constraints.interconnect}, "
            f"at best {BY_RANK[int(ranks[site])]} at {sites[site].id}"
            for row, site in zip(rows.tolist(), best.tolist(), strict=True)
        ]
        return messages
