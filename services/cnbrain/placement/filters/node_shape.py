"""Sites with node pools, none of which has nodes of the request's shape, or enough of them."""

import numpy as np

from cnbrain.ledger.nodes import Gang, Pool
from cnbrain.netmap.arrays import IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.filters.gangs import described
from cnbrain.placement.framework import BoolMatrix, Code


class NodeShapeFilter:
    name = "node_shape"
    code = Code.UNRESOLVABLE
    reason = "no node pool of the site has nodes of the request's shape, or enough of them"

    def filter(self, state: CycleState) -> BoolMatrix:
        fit: BoolMatrix = state.node_suits[state.batch.gang_kind]
        return fit

    def explain(self, state: CycleState, rejected: BoolMatrix, rows: IntArray) -> list[str]:
        """The gang and the largest nodes of its model there ("wants 1 node with 64 H800;
        nodes of 8 H800 at most, 32 of them (XJ-hub)")."""
        messages = []
        for row in rows.tolist():
            gang = state.batch.gangs[row]
            site = int(np.flatnonzero(rejected[row])[0])
            pools = [p for p in state.pools[site] if p.model == gang.model]
            messages.append(f"wants {described(gang)}; {_largest(pools, gang)}")
        return messages


def _largest(pools: list[Pool], gang: Gang) -> str:
    if not pools:
        return "no node pool of that kind"
    biggest = max(pools, key=lambda p: (p.units, p.count))
    what = f"{biggest.devices} {biggest.model}" if gang.model else f"{biggest.cpu_m // 1000} cores"
    return f"nodes of {what} at most, {biggest.count} of them"
