"""When a gang could start on a site's nodes: the node takes of the reservations that hold
there given back as each ends, and nothing else taken meanwhile.

The admission calendar counts a site's totals. A site with node pools may hold a gang in its
totals but in none of its nodes (four nodes of 8 accelerators with 3 free each, for one node
of 8): its earliest start is then when enough takes have ended to free the nodes it needs,
chosen as the ledger chooses them (`nodes.pick_on`).
"""

from collections.abc import Iterable, Sequence

from cnbrain.ledger.nodes import Gang, NodeConflict, NodeState, NodeTake, Pool, pick_on

Ending = tuple[int, NodeTake]
"""A node take and the epoch second its holder ends."""


class SiteNodes:
    """A site's `pools` (in order) with the node `takes` held there until their holders end;
    a take that names no node of the pools, or would overfill one, is left out. Built once,
    it answers any number of gangs."""

    def __init__(self, pools: Sequence[Pool], takes: Iterable[Ending]) -> None:
        self._pools = tuple(pools)
        self._now = [NodeState(pool) for pool in self._pools]
        self._takes: list[Ending] = []
        for end, take in takes:
            if not 0 <= take.pool < len(self._now):
                continue
            try:
                self._now[take.pool].apply(take)
            except NodeConflict:
                continue
            self._takes.append((end, take))

    def earliest(self, gang: Gang, *, now: int) -> int | None:
        """The earliest epoch second from `now` at which `gang` fits one of the pools: `now`
        when it fits now (or nothing is taken: every gang the engine lets on the site fits
        it then), else the end at which it first fits once every take ending by then
        (a take ended before `now` ends at `now`) is given back; None when it fits not even
        every node free."""
        if not self._takes or pick_on(self._now, gang) is not None:
            return now
        states = [NodeState(pool) for pool in self._pools]
        ending: dict[int, list[NodeTake]] = {}
        for end, take in self._takes:
            states[take.pool].apply(take)
            ending.setdefault(max(end, now), []).append(take)
        for end in sorted(ending):
            for take in ending[end]:
                states[take.pool].apply(take, sign=-1)
            if pick_on(states, gang) is not None:
                return end
        return None


def earliest_on_nodes(
    pools: Sequence[Pool], takes: Iterable[Ending], gang: Gang, *, now: int
) -> int | None:
    """`SiteNodes(pools, takes).earliest(gang, now=now)`."""
    return SiteNodes(pools, takes).earliest(gang, now=now)
