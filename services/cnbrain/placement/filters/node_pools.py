"""Sites with node pools none of which has the request's nodes free now."""

import numpy as np

from cnbrain.ledger.nodes import Gang
from cnbrain.netmap.arrays import IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.filters.gangs import described
from cnbrain.placement.framework import BoolMatrix, Code


class NodePoolsFilter:
    name = "node_pools"
    code = Code.UNSCHEDULABLE
    reason = "no node pool of the site has the request's nodes free"

    def filter(self, state: CycleState) -> BoolMatrix:
        return state.node_fit()

    def explain(self, state: CycleState, rejected: BoolMatrix, rows: IntArray) -> list[str]:
        """The gang and the most such nodes free at a rejected site ("wants 8 nodes with 8
        H800, ... each; at most 3 such nodes free (XJ-hub)")."""
        messages = []
        sites = state.arrays.map.sites
        for row in rows.tolist():
            gang = state.batch.gangs[row]
            best, most = -1, -1
            for site in np.flatnonzero(rejected[row]).tolist():
                free = _free_nodes(state, site, gang)
                if free > most:
                    best, most = site, free
            if gang.milli:
                short = f"no {gang.model} with that much room ({sites[best].id})"
            else:
                short = f"at most {most} such nodes free ({sites[best].id})"
            messages.append(f"wants {described(gang)}; {short}")
        return messages


def _free_nodes(state: CycleState, site: int, gang: Gang) -> int:
    """The most nodes of one pool of `site` with `gang`'s units free."""
    pools, summaries = state.pools[site], state.snapshot.nodes[site]
    return max(
        (
            summary.free_nodes(gang.units(pool))
            for pool, summary in zip(pools, summaries, strict=True)
            if gang.suits(pool)
        ),
        default=0,
    )
