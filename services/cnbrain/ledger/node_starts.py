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


def earliest_on_nodes(
    pools: Sequence[Pool], takes: Iterable[Ending], gang: Gang, *, now: int
) -> int | None:
    """The earliest epoch second from `now` at which `gang` fits one of a site's `pools`
    (in order), with `takes` held until they end: `now` when it fits now, else the end at
    which it first fits once every take ending by then is given back; None when it fits
    not even every node free. A take that names no node of the pools, or would overfill
    one, is left out."""
    states = [NodeState(pool) for pool in pools]
    ending: dict[int, list[NodeTake]] = {}
    for end, take in takes:
        if not 0 <= take.pool < len(states):
            continue
        try:
            states[take.pool].apply(take)
        except NodeConflict:
            continue
        ending.setdefault(max(end, now), []).append(take)
    if pick_on(states, gang) is not None:
        return now
    for end in sorted(ending):
        for take in ending[end]:
            states[take.pool].apply(take, sign=-1)
        if pick_on(states, gang) is not None:
            return end
    return None
