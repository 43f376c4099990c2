"""A request may leave its province only for a national hub site."""

from cnbrain.domain.enums import SiteKind
from cnbrain.netmap.arrays import SITE_KIND_CODES, IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.framework import BoolMatrix, Code


class HubAcrossProvincesFilter:
    name = "hub_across_provinces"
    code = Code.UNRESOLVABLE
    reason = "outside the source province only national hub sites may be used"

    def filter(self, state: CycleState) -> BoolMatrix:
        a = state.arrays
        hub = a.site_kind == SITE_KIND_CODES[SiteKind.HUB]
        same = a.site_province[None, :] == state.batch.source_province[:, None]
        mask: BoolMatrix = hub[None, :] | same
        return mask

    def explain(self, state: CycleState, rejected: BoolMatrix, rows: IntArray) -> list[str]:
        """The request's source province ("from ZJ: non-hub sites of other provinces")."""
        requests = state.batch.requests
        messages = [
            f"from {requests[row].source_province}: non-hub sites of other provinces"
            for row in rows.tolist()
        ]
        return messages
