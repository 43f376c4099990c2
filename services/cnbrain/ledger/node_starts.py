"""When a gang could start on a site's nodes: the node takes of the reservations that hold
there given back as each ends, and nothing else taken meanwhile.

The admission calendar counts a site's totals. A site with node pools may hold a gang in its
totals but in none of its nodes (four nodes of 8 accelerators with 3 free each, for one node
of 8): its earliest start is then when enough takes have ended to free the nodes it needs,
chosen as the ledger chooses them (`nodes.pick_on`).

A plan books its gangs on the nodes as it goes (`SiteNodes.book`), each over its planned
window, and a gang planned after them fits only around them (`SiteNodes.free_from`): two
gangs waiting for the same node are not both planned for when it frees.
"""

from collections.abc import Iterable, Sequence

from cnbrain.ledger.nodes import Gang, NodeConflict, NodeState, NodeTake, Pool, pick_on

Ending = tuple[int, NodeTake]
"""A node take and the epoch second its holder ends."""

MAX_STARTS_TRIED = 64
"""Starts `SiteNodes.free_from` tries around booked gangs before it answers the first at
which every take and booking has ended."""


class SiteNodes:
    """A site's `pools` (in order) with the node `takes` held there until their holders end;
    a take that names no node of the pools, or would overfill one, is left out. Built once,
    it answers any number of gangs."""

    def __init__(self, pools: Sequence[Pool], takes: Iterable[Ending]) -> None:
        self._pools = tuple(pools)
        self._now = [NodeState(pool) for pool in self._pools]
        self._takes: list[Ending] = []
        self._booked: list[tuple[int, int, NodeTake]] = []
        """The takes of gangs booked over windows of their own (start, end, take); those
        that hold from now are held as the takes read are, where they can be."""
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

    def free_from(self, gang: Gang, start: int, duration: int, *, now: int) -> int | None:
        """The earliest epoch second from `start` (at least `now`) at which `gang` fits the
        nodes for `duration` seconds, around the takes held and the gangs booked; None when
        it fits not even every node free.

        Over a window, a node counts as holding every take and booking that overlaps it,
        all at once (a node they would overfill holds nothing free): a start found is never
        one at which the gang would share a node beyond its shape, though it may be later
        than the exact one. After `MAX_STARTS_TRIED` starts, the answer is the first at
        which every take and booking has ended."""
        start = max(start, now)
        if not self._booked:
            at = self.earliest(gang, now=now)
            return None if at is None else max(at, start)
        ending = sorted(self._takes, key=lambda held: held[0])
        ends = {max(end, now) for end, _ in ending} | {end for _, end, _ in self._booked}
        starts = sorted({start} | {end for end in ends if end > start})
        states = [state.copy() for state in self._now]
        given_back = 0
        for at in starts[:MAX_STARTS_TRIED]:
            while given_back < len(ending) and max(ending[given_back][0], now) <= at:
                take = ending[given_back][1]
                states[take.pool].apply(take, sign=-1)
                given_back += 1
            if pick_on(states, gang) is None:
                continue  # the bookings only take more
            if pick_on(self._with_booked(states, at, at + duration), gang) is not None:
                return at
        if pick_on([NodeState(pool) for pool in self._pools], gang) is None:
            return None
        return starts[-1]

    def book(self, gang: Gang, start: int, end: int, *, now: int) -> list[NodeTake] | None:
        """Take `gang`'s nodes over [`start`, `end`), chosen as the ledger would around what
        is held and booked over that window, so that the gangs asked of `free_from` after
        fit around it; None (nothing booked) when it does not fit there."""
        picked = pick_on(self._now, gang) if start <= now and not self._booked else None
        if picked is None:
            picked = pick_on(self._over(start, end, now=now), gang)
        if picked is None:
            return None
        if start > now or not self._hold_now(picked, end):
            self._booked.extend((start, end, take) for take in picked)
        return picked

    def _hold_now(self, takes: Sequence[NodeTake], end: int) -> bool:
        """Hold `takes` from now until `end` as the takes read are held; False, changing
        nothing, when the nodes as read cannot (one they hold is given back by now)."""
        done: list[NodeTake] = []
        try:
            for take in takes:
                self._now[take.pool].apply(take)
                done.append(take)
        except NodeConflict:
            for take in done:
                self._now[take.pool].apply(take, sign=-1)
            return False
        self._takes.extend((end, take) for take in takes)
        return True

    def _over(self, start: int, end: int, *, now: int) -> list[NodeState]:
        """The nodes holding every take and booking that overlaps [`start`, `end`)."""
        states = [state.copy() for state in self._now]
        for until, take in self._takes:
            if max(until, now) <= start:
                states[take.pool].apply(take, sign=-1)
        return self._with_booked(states, start, end)

    def _with_booked(self, states: list[NodeState], start: int, end: int) -> list[NodeState]:
        """Copies of `states` holding too every booking that overlaps [`start`, `end`) (a
        node they would overfill holds nothing free)."""
        out = [state.copy() for state in states]
        for begins, until, take in self._booked:
            if begins < end and until > start:
                state = out[take.pool]
                try:
                    state.apply(take)
                except NodeConflict:
                    state.exhaust(take.node)
        return out


def earliest_on_nodes(
    pools: Sequence[Pool], takes: Iterable[Ending], gang: Gang, *, now: int
) -> int | None:
    """`SiteNodes(pools, takes).earliest(gang, now=now)`."""
    return SiteNodes(pools, takes).earliest(gang, now=now)
