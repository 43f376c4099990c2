"""When a gang could start on a site's nodes: the node takes of the reservations that hold
there given back as each ends, and nothing else taken meanwhile.

The admission calendar counts a site's totals. A site with node pools may hold a gang in its
totals but in none of its nodes (four nodes of 8 accelerators with 3 free each, for one node
of 8): its earliest start is then when enough takes have ended to free the nodes it needs,
chosen as the ledger chooses them (`nodes.pick_on`).

A plan books its gangs on the nodes as it goes (`SiteNodes.book`), each over its planned
window, and a gang planned after them fits only around them (`SiteNodes.free_from`): two
gangs waiting for the same node are not both planned for when it frees. A gang that starts
now holds its nodes from now on, as a take; of those that start later, the first
`MAX_BOOKED` on a site are booked.
"""

from collections.abc import Iterable, Sequence

from cnbrain.ledger.nodes import Gang, NodeConflict, NodeState, NodeTake, Pool, pick_on, take_all

Ending = tuple[int, NodeTake]
"""A node take and the epoch second its holder ends."""

MAX_STARTS_TRIED = 64
"""Starts `SiteNodes.free_from` tries around booked gangs before it answers the first at
which every take and booking has ended."""

MAX_BOOKED = 8
"""Gangs booked on one site's nodes to start later: the first that a plan puts there; the
gangs planned after them fit around them, but are not booked themselves (so that planning
stays within a few checks a gang)."""


class SiteNodes:
    """A site's `pools` (in order) with the node `takes` held there until their holders end;
    a take that names no node of the pools, or would overfill one, is left out. Built once,
    it answers any number of gangs."""

    def __init__(self, pools: Sequence[Pool], takes: Iterable[Ending]) -> None:
        self._pools = tuple(pools)
        self._now = [NodeState(pool) for pool in self._pools]
        self._takes: list[Ending] = []
        self._gangs_booked = 0
        self._earliest: dict[tuple[Gang, int], int | None] = {}
        self._sorted: list[Ending] | None = None
        self._combined: dict[tuple[int, tuple[int, ...]], list[NodeState]] = {}
        """The nodes with the first takes by end given back and some bookings held (by how
        many and which), as `free_from` built them since the takes and bookings last
        changed."""
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
        states = [state.copy() for state in self._now]
        ending = self._by_end()
        for i, (end, take) in enumerate(ending):
            states[take.pool].apply(take, sign=-1)
            last = i + 1 == len(ending) or ending[i + 1][0] > end
            if last and pick_on(states, gang) is not None:
                return max(end, now)
        return None

    def _by_end(self) -> list[Ending]:
        """The takes held, by their end."""
        if self._sorted is None:
            self._sorted = sorted(self._takes, key=lambda held: held[0])
        return self._sorted

    def free_from(self, gang: Gang, start: int, duration: int, *, now: int) -> int | None:
        """The earliest epoch second from `start` (at least `now`) at which `gang` fits the
        nodes for `duration` seconds, around the takes held and the gangs booked; None when
        it fits not even every node free.

        Over a window, a node counts as holding every take and booking that overlaps it,
        all at once (a node they would overfill holds nothing free): a start found is never
        one at which the gang would share a node beyond its shape, though it may be later
        than the exact one. The search begins where the takes alone let the gang fit
        (`earliest`, from which on they always do); after `MAX_STARTS_TRIED` starts, the
        answer is the first at which every take and booking has ended."""
        base = self._earliest_known(gang, now=now)
        if base is None:
            return None
        start = max(start, now, base)
        suited = {i for i, pool in enumerate(self._pools) if gang.suits(pool)}
        booked = [i for i, (_, end, t) in enumerate(self._booked) if t.pool in suited]
        if not any(self._booked[i][1] > start for i in booked):
            return start
        ending = self._by_end()
        # Only what ends on a pool that may hold the gang can let it fit.
        ends = {max(end, now) for end, t in ending if t.pool in suited}
        ends |= {self._booked[i][1] for i in booked}
        starts = sorted({start} | {end for end in ends if end > start})
        states = [state.copy() for state in self._now]
        given_back = 0
        for at in starts[:MAX_STARTS_TRIED]:
            while given_back < len(ending) and max(ending[given_back][0], now) <= at:
                take = ending[given_back][1]
                states[take.pool].apply(take, sign=-1)
                given_back += 1
            over = tuple(
                i for i in booked if self._booked[i][0] < at + duration and self._booked[i][1] > at
            )
            if not over:
                return at  # the takes alone hold it from `start` on
            key = (given_back, over)
            if key not in self._combined:
                self._combined[key] = _with_booked(states, [self._booked[i] for i in over])
            if pick_on(self._combined[key], gang) is not None:
                return at
        return starts[-1]

    def _earliest_known(self, gang: Gang, *, now: int) -> int | None:
        """`earliest`, remembered until the takes change."""
        key = (gang, now)
        if key not in self._earliest:
            self._earliest[key] = self.earliest(gang, now=now)
        return self._earliest[key]

    def book(self, gang: Gang, start: int, end: int, *, now: int) -> list[NodeTake] | None:
        """Take `gang`'s nodes over [`start`, `end`), chosen as the ledger would around what
        is held and booked over that window, so that the gangs asked of `free_from` after
        fit around it; None (nothing booked) when it does not fit there, or it starts later
        and `MAX_BOOKED` gangs are booked to start later already."""
        if start > now and self._gangs_booked >= MAX_BOOKED:
            return None
        picked = pick_on(self._now, gang) if start <= now and not self._booked else None
        if picked is None:
            picked = pick_on(self._over(start, end, now=now), gang)
        if picked is None:
            return None
        if start > now or not self._hold_now(picked, end):
            self._booked.extend((start, end, take) for take in picked)
            self._combined.clear()
            self._gangs_booked += 1
        return picked

    def _hold_now(self, takes: Sequence[NodeTake], end: int) -> bool:
        """Hold `takes` from now until `end` as the takes read are held; False, changing
        nothing, when the nodes as read cannot (one they hold is given back by now)."""
        if not take_all(self._now, takes):
            return False
        self._takes.extend((end, take) for take in takes)
        self._earliest.clear()
        self._combined.clear()
        self._sorted = None
        return True

    def _over(self, start: int, end: int, *, now: int) -> list[NodeState]:
        """The nodes holding every take and booking that overlaps [`start`, `end`)."""
        states = [state.copy() for state in self._now]
        for until, take in self._takes:
            if max(until, now) <= start:
                states[take.pool].apply(take, sign=-1)
        over = [held for held in self._booked if held[0] < end and held[1] > start]
        return _with_booked(states, over)


def earliest_on_nodes(
    pools: Sequence[Pool], takes: Iterable[Ending], gang: Gang, *, now: int
) -> int | None:
    """`SiteNodes(pools, takes).earliest(gang, now=now)`."""
    return SiteNodes(pools, takes).earliest(gang, now=now)


def _with_booked(
    states: list[NodeState], booked: Iterable[tuple[int, int, NodeTake]]
) -> list[NodeState]:
    """`states`, with copies of the pools holding too every booking of `booked`: on each
    node, the sum of its bookings (its shares of an accelerator on that accelerator), or
    everything the node has free when that is more."""
    held: dict[tuple[int, int], list[int]] = {}
    shares: dict[tuple[int, int, int], int] = {}
    for _, _, take in booked:
        amounts = held.setdefault((take.pool, take.node), [0, 0, 0])
        amounts[0] += take.devices
        amounts[1] += take.cpu_m
        amounts[2] += take.mem_mib
        if take.shared >= 0:
            key = (take.pool, take.node, take.shared)
            shares[key] = shares.get(key, 0) + take.milli
    out = list(states)
    copied: set[int] = set()

    def state(pool: int) -> NodeState:
        if pool not in copied:
            out[pool] = out[pool].copy()
            copied.add(pool)
        return out[pool]

    for (pool, node, device), milli in shares.items():
        state(pool).take_share_or_fill(node, device, milli)
    for (pool, node), (devices, cpu_m, mem_mib) in held.items():
        state(pool).take_or_fill(node, devices, cpu_m, mem_mib)
    return out
