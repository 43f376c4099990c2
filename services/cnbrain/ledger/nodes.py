"""Node pools: what a brain knows of a site's nodes, and which nodes a gang takes.

Two-level scheduling: the site's own scheduler places jobs on named nodes; a brain keeps, per
node pool (`Pool`: `count` nodes of one shape), only what it needs to decide where a gang
fits.

- `NodeState` is what the brain's own reservations take of each node of one pool, node by
  node: whole accelerators, CPU, memory, and the milli-accelerators taken of each shared
  accelerator (one that fractions use). The ledger rebuilds it from the takes it stores
  (`NodeTake`), so it is exact for the brain's reservations.
- `PoolSummary` is the compact form the placement engine and other brains see: how many
  nodes have each number of units free (whole accelerators; whole cores in a CPU pool), and
  how many shared accelerators have each amount of free milli-accelerators. What the site's
  own scheduler reports free is a summary too (`PoolSummary.of_free_units`), and the one the
  engine sees is the brain's bounded by it (`PoolSummary.within`).

A `Gang` asks for `nodes` nodes, each with its CPU, memory and whole accelerators, all at once
(on one pool: one shape, one fabric); or, with `milli`, a fraction of one accelerator, on a
shared accelerator or a whole free one. Where on a site it goes, the pool, the nodes and the
accelerator, is where the fragmentation of the site's free accelerators grows least against
the shapes the site's reservations hold (`cnbrain.ledger.fragments`). Ties, and every
choice on a site that holds nothing, go to best fit: the pool and the nodes left with the
fewest units free that still hold it, and for a fraction the shared accelerator with the
least room that still holds it, else a whole free one of the node with the fewest free; then
to the first pool.
`PoolSummary.fits` and `take` do on the summary what `NodeState.pick` does node by node, and
`take_on` what `pick_on` does on a site: when CPU and memory do not bind, they agree, and a
gang that fits the summary of a CPU pool always fits its nodes.
"""

import itertools
import math
from bisect import insort
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from cnbrain.domain.accelerators import MILLI
from cnbrain.domain.errors import Conflict, Invalid
from cnbrain.domain.request import ResourceDemand
from cnbrain.domain.site import NodePool
from cnbrain.ledger.fragments import NO_MIX, Held, Mix
from cnbrain.netmap.arrays import demand_units


class NodeConflict(Conflict):
    """A node take would leave a node's free amounts outside [0, its shape]."""


@dataclass(frozen=True, slots=True)
class Pool:
    """`count` nodes of one shape, in the ledger's units: `cpu_m`, `mem_mib` and `devices`
    accelerators of `model` (None and 0: a CPU pool) on each."""

    name: str
    count: int
    cpu_m: int
    mem_mib: int
    model: str | None
    devices: int

    @classmethod
    def of(cls, pool: NodePool) -> "Pool":
        return cls(
            name=pool.name,
            count=pool.count,
            cpu_m=math.floor(round(pool.cpu_cores * 1000, 6)),
            mem_mib=math.floor(round(pool.memory_gib * 1024, 6)),
            model=pool.accelerator,
            devices=pool.accelerators,
        )

    @property
    def units(self) -> int:
        """Units of one node: its accelerators, or its whole cores in a CPU pool."""
        return self.devices if self.model is not None else self.cpu_m // 1000

    def units_of(self, devices: int, cpu_m: int) -> int:
        """Units that a node's share of `devices` whole accelerators and `cpu_m` millicores
        takes: the accelerators, or the whole cores (rounded up) in a CPU pool."""
        return devices if self.model is not None else math.ceil(cpu_m / 1000)


@dataclass(frozen=True, slots=True)
class Gang:
    """`nodes` nodes, each with `cpu_m`, `mem_mib` and `devices` whole accelerators of
    `model` (None: no accelerator); or, with `milli` (1 to 999), that many thousandths of one
    accelerator of `model` on one node, with `cpu_m` and `mem_mib` there."""

    nodes: int
    cpu_m: int
    mem_mib: int
    model: str | None = None
    devices: int = 0
    milli: int = 0

    def __post_init__(self) -> None:
        if self.nodes < 1 or min(self.cpu_m, self.mem_mib, self.devices, self.milli) < 0:
            raise Invalid(f"a gang needs at least one node and no negative amount: {self}")
        if self.milli and (self.milli >= MILLI or self.devices or self.nodes != 1):
            raise Invalid(f"a fraction is below one accelerator, on one node: {self}")
        if (self.devices or self.milli) and self.model is None:
            raise Invalid(f"accelerators of no model: {self}")

    @classmethod
    def of_amounts(
        cls, *, nodes: int, cpu_m: int, mem_mib: int, model: str | None, acc_milli: int
    ) -> "Gang":
        """The gang of a whole gang's amounts in the ledger's units, split evenly over
        `nodes`: `acc_milli` below one accelerator is a fraction of one. Raises Invalid
        when the accelerators do not split into whole ones per node, or a fraction is
        asked of more than one node."""
        if 0 < acc_milli < MILLI:
            return cls(nodes=nodes, cpu_m=cpu_m, mem_mib=mem_mib, model=model, milli=acc_milli)
        if acc_milli % (MILLI * nodes):
            raise Invalid(
                f"{acc_milli} thousandths of accelerators do not split evenly over {nodes} nodes"
            )
        return cls(
            nodes=nodes,
            cpu_m=cpu_m // nodes,
            mem_mib=mem_mib // nodes,
            model=model if acc_milli else None,
            devices=acc_milli // MILLI // nodes,
        )

    def suits(self, pool: Pool) -> bool:
        """Whether `pool`'s shape and size can ever hold the gang: the same accelerator
        model (or both none), each node's amounts within one node's, enough nodes."""
        return (
            pool.model == self.model
            and self.cpu_m <= pool.cpu_m
            and self.mem_mib <= pool.mem_mib
            and self.devices <= pool.devices
            and (not self.milli or pool.devices >= 1)
            and self.nodes <= pool.count
        )

    def units(self, pool: Pool) -> int:
        """Units each node must have free in `pool`: whole accelerators, or whole cores
        (rounded up) in a CPU pool."""
        return pool.units_of(self.devices, self.cpu_m)


def gang_of(demand: ResourceDemand) -> Gang:
    """The gang of a request's resources: its nodes and each node's amounts."""
    units = demand_units(demand)
    return Gang.of_amounts(
        nodes=demand.nodes,
        cpu_m=units.cpu_m,
        mem_mib=units.mem_mib,
        model=units.accelerator_model,
        acc_milli=units.accelerator_milli,
    )


@dataclass(frozen=True, slots=True)
class NodeTake:
    """What one reservation takes of node `node` of pool `pool` (their indices on the site):
    `devices` whole accelerators, `milli` of the shared accelerator `shared` (-1: none),
    `cpu_m` and `mem_mib`."""

    pool: int
    node: int
    devices: int
    shared: int
    milli: int
    cpu_m: int
    mem_mib: int


Rank = tuple[int, int, int]
"""How a pool's take of a gang ranks against the other pools' (lowest first): the growth of
fragmentation, then the best fit; for whole accelerators `(growth, units the nodes taken keep
free, 0)`, for a fraction `(growth, 0, free milli)` on a shared accelerator and `(growth, 1,
whole accelerators free)` on a node whose whole one it opens."""


@dataclass(frozen=True, slots=True)
class PoolSummary:
    """`nodes_by_free[k]`: the pool's nodes with `k` units free (k from 0 to a node's units);
    `shared_by_free`: `(free milli, accelerators)` of the shared accelerators with room left,
    by free milli ascending; `held`: in an accelerator pool, the shapes the brain's
    reservations hold on its nodes, `(devices, milli, node takes)` by shape (the mix of
    `cnbrain.ledger.fragments`)."""

    nodes_by_free: tuple[int, ...]
    shared_by_free: tuple[tuple[int, int], ...] = ()
    held: Held = ()

    @classmethod
    def empty(cls, pool: Pool) -> "PoolSummary":
        """The summary of `pool` with nothing taken (one object per pool shape: `is` tells
        an untouched pool)."""
        return _empty(pool)

    @classmethod
    def of_free_units(
        cls, pool: Pool, free_units: Iterable[int], shared_free: Iterable[int] = ()
    ) -> "PoolSummary":
        """The summary of `pool` when its nodes have `free_units` units free, one number per
        node (clipped to [0, a node's units]): numbers beyond the pool's count are left out,
        and nodes the numbers do not reach count as none free. `shared_free` gives the free
        milli-accelerators of each shared accelerator: those from 1 to `MILLI - 1` count,
        as many as the pool has accelerators at most."""
        nodes = [0] * (pool.units + 1)
        counted = 0
        for units in free_units:
            if counted == pool.count:
                break
            nodes[min(max(units, 0), pool.units)] += 1
            counted += 1
        nodes[0] += pool.count - counted
        shared: dict[int, int] = {}
        for free in itertools.islice(
            (f for f in shared_free if 0 < f < MILLI), pool.count * pool.devices
        ):
            shared[free] = shared.get(free, 0) + 1
        return cls(tuple(nodes), tuple(sorted(shared.items())))

    def within(self, reported: "PoolSummary", *, shared: bool = False) -> "PoolSummary":
        """This summary bounded by `reported`, a summary of the same pool from elsewhere (what
        the site's scheduler reports): for every k, as many nodes with k units or more free
        as the fewer of the two shows; with `shared` (the report tells its shared
        accelerators), for every m, as many shared accelerators with m milli-accelerators or
        more free as the fewer shows. Otherwise shared accelerators, and always the held
        shapes, are this summary's. Raises Invalid when the two are not of one pool (units
        per node or node count differ)."""
        mine, theirs = self.nodes_by_free, reported.nodes_by_free
        if len(mine) != len(theirs) or sum(mine) != sum(theirs):
            raise Invalid(f"summaries of two pools: {mine} and {theirs}")
        fewer = [0] * len(mine)
        for k, count in _fewer_at_least(_levels(mine), _levels(theirs)):
            fewer[k] = count
        fewer[0] = sum(mine) - sum(fewer)
        nodes = tuple(fewer)
        bounded = _fewer_at_least(self.shared_by_free, reported.shared_by_free) if shared else None
        if nodes == mine and bounded in (None, self.shared_by_free):
            return self
        return PoolSummary(nodes, self.shared_by_free if bounded is None else bounded, self.held)

    def less(self, takes: Iterable[int], opened: Iterable[int] = ()) -> "PoolSummary":
        """This summary (what a site's scheduler reports free) less node takes it does not
        show yet, `takes` giving the units of each (whole accelerators, or whole cores in a
        CPU pool): the largest first, each from the node with the fewest units free that
        holds it (best fit), else from the node with the most, left with none; takes of no
        unit count for nothing. `opened` gives the free milli-accelerators of the shared
        accelerators those takes open (each also one of `takes`), which join this summary's
        shared accelerators; held shapes are this summary's."""
        nodes = list(self.nodes_by_free)
        most = len(nodes) - 1
        for units in sorted((u for u in takes if u > 0), reverse=True):
            fit = next((k for k in range(units, most + 1) if nodes[k]), None)
            if fit is not None:
                nodes[fit] -= 1
                nodes[fit - units] += 1
                continue
            largest = next((k for k in range(most, 0, -1) if nodes[k]), None)
            if largest is not None:
                nodes[largest] -= 1
                nodes[0] += 1
        shared = list(self.shared_by_free)
        for free in opened:
            if 0 < free < MILLI:
                _add_one(shared, free)
        if tuple(nodes) == self.nodes_by_free and tuple(shared) == self.shared_by_free:
            return self
        return PoolSummary(tuple(nodes), tuple(shared), self.held)

    def free_nodes(self, units: int) -> int:
        """Nodes with at least `units` units free."""
        return sum(self.nodes_by_free[units:]) if units < len(self.nodes_by_free) else 0

    def fits(self, gang: Gang, pool: Pool) -> bool:
        """Whether `gang` fits what this summary of `pool` shows free (module docstring)."""
        if not gang.suits(pool):
            return False
        if gang.milli:
            return any(free >= gang.milli for free, _ in self.shared_by_free) or (
                self.free_nodes(1) >= 1
            )
        return self.free_nodes(gang.units(pool)) >= gang.nodes

    def take(self, gang: Gang, pool: Pool, mix: Mix = NO_MIX) -> "PoolSummary":
        """This summary less `gang`, taken as `NodeState.pick` takes it against `mix`. Raises
        NodeConflict when it does not fit."""
        return self.taken(gang, pool, mix)[0]

    def taken(self, gang: Gang, pool: Pool, mix: Mix = NO_MIX) -> tuple["PoolSummary", Rank]:
        """`take`'s summary, and the rank of the take among the takes of `gang` on other
        pools of the site (lowest first: `Rank`)."""
        if not self.fits(gang, pool):
            raise NodeConflict(f"{gang} does not fit pool {pool.name!r}")
        nodes = list(self.nodes_by_free)
        shared = list(self.shared_by_free)
        held = _held(self.held, gang, pool)
        if gang.milli:
            options = [
                (mix.shared_growth(free, gang.milli), 0, free)
                for free, _ in shared
                if free >= gang.milli
            ]
            options += [
                (mix.opened_growth(k, gang.milli), 1, k) for k in range(1, len(nodes)) if nodes[k]
            ]
            rank = min(options)
            _, opens, at = rank
            if opens:
                nodes[at] -= 1
                nodes[at - 1] += 1
                left = MILLI - gang.milli
            else:
                _drop_one(shared, next(i for i, (free, _) in enumerate(shared) if free == at))
                left = at - gang.milli
            if left:
                _add_one(shared, left)
            return PoolSummary(tuple(nodes), tuple(shared), held), rank
        need, wanted, growth, left = gang.units(pool), gang.nodes, 0, 0
        for k, grows in mix.levels(need, len(nodes) - 1):
            took = min(self.nodes_by_free[k], wanted)  # of the nodes free before: each once
            if not took:
                continue
            nodes[k] -= took
            nodes[k - need] += took
            growth += took * grows
            left += took * (k - need)
            wanted -= took
            if not wanted:
                break
        return PoolSummary(tuple(nodes), tuple(shared), held), (growth, left, 0)


def _levels(by_free: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """`(k, count)` of a count by free units, for every k from 1 that has some."""
    return tuple((k, count) for k, count in enumerate(by_free) if k and count)


def _fewer_at_least(
    mine: tuple[tuple[int, int], ...], theirs: tuple[tuple[int, int], ...]
) -> tuple[tuple[int, int], ...]:
    """`(free, count)` by free ascending, for every amount m as many with m or more free as
    the fewer of `mine` and `theirs` shows (both `(free, count)`, each free once): nodes by
    free units, or shared accelerators by free milli."""
    levels = sorted({free for free, _ in mine} | {free for free, _ in theirs}, reverse=True)
    mine_left, theirs_left = dict(mine), dict(theirs)
    out: list[tuple[int, int]] = []
    have = told = shown = 0
    for free in levels:
        have += mine_left.get(free, 0)
        told += theirs_left.get(free, 0)
        at_least = min(have, told)
        if at_least > shown:
            out.append((free, at_least - shown))
            shown = at_least
    return tuple(reversed(out))


def describes(
    pool: Pool, nodes_by_free: Sequence[int], shared_by_free: Iterable[tuple[int, int]]
) -> bool:
    """Whether a summary sent or stored elsewhere could be one of `pool`: a count of nodes
    for every number of units a node can have free, none negative, summing to the pool's
    nodes; shared accelerators each with a fraction of one free (1 to `MILLI - 1`), each
    count at least one, at most the pool's accelerators in all."""
    shared = tuple(shared_by_free)
    return (
        len(nodes_by_free) == pool.units + 1
        and min(nodes_by_free, default=0) >= 0
        and sum(nodes_by_free) == pool.count
        and all(0 < free < MILLI and count >= 1 for free, count in shared)
        and sum(count for _, count in shared) <= pool.count * pool.devices
    )


@dataclass(frozen=True, slots=True)
class PoolReport:
    """What a site's scheduler reports free on one pool: `summary`, its nodes by free units
    and, when `shards` (the site cuts its accelerators into shards and its report counts the
    shards in use on each), its shared accelerators by free milli-accelerators; without
    `shards` it tells nothing of them."""

    summary: PoolSummary
    shards: bool = False


def _held(held: Held, gang: Gang, pool: Pool) -> Held:
    """`held` with `gang`'s node takes added; unchanged in a CPU pool."""
    if pool.model is None:
        return held
    counts = {(d, m): n for d, m, n in held}
    shape = (gang.devices, gang.milli)
    counts[shape] = counts.get(shape, 0) + gang.nodes
    return tuple((d, m, n) for (d, m), n in sorted(counts.items()))


@lru_cache(maxsize=4096)
def _empty(pool: Pool) -> PoolSummary:
    return PoolSummary(tuple([0] * pool.units + [pool.count]))


def _drop_one(shared: list[tuple[int, int]], i: int) -> None:
    free, count = shared[i]
    if count == 1:
        del shared[i]
    else:
        shared[i] = (free, count - 1)


def _add_one(shared: list[tuple[int, int]], free: int) -> None:
    for i, (have, count) in enumerate(shared):
        if have == free:
            shared[i] = (free, count + 1)
            return
    insort(shared, (free, 1))


class NodeState:
    """What is free on each node of one pool (module docstring): apply the takes of the
    reservations that hold, then `pick` the nodes of a new gang and `summary` the rest. Only
    the nodes something takes are kept (the others are whole), and the counts the summary
    shows are kept as takes are applied, so neither walks the pool's nodes."""

    __slots__ = ("_by_units", "_full", "_held", "_shared", "_shared_free", "_used", "pool")

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._full = (pool.devices, pool.cpu_m, pool.mem_mib)
        self._used: dict[int, tuple[int, int, int]] = {}
        """Per node something takes: its free whole accelerators, CPU and memory."""
        self._shared: dict[int, dict[int, int]] = {}
        """Per node with shared accelerators: free milli-accelerators by accelerator."""
        self._by_units = [0] * pool.units + [pool.count]
        self._shared_free: dict[int, int] = {}
        """Shared accelerators with room left, by their free milli-accelerators."""
        self._held: dict[tuple[int, int], int] = {}
        """Node takes by shape (devices, milli), in an accelerator pool."""

    def _free(self, n: int) -> tuple[int, int, int]:
        return self._used.get(n, self._full)

    def _units_of(self, free: tuple[int, int, int]) -> int:
        return free[0] if self.pool.model is not None else free[1] // 1000

    def apply(self, take: NodeTake, *, sign: int = 1, takes: int = 1) -> None:
        """Take (`sign` 1) or give back (-1) `take` on its node: one node take, or the sum
        of `takes` node takes of one shape (each `take.devices // takes` accelerators, or
        `take.milli // takes` of one), as a store that sums them reads them. Raises
        NodeConflict, and changes nothing, when that leaves an amount outside [0, the
        node's shape] or names no node or accelerator of the pool."""
        pool, n = self.pool, take.node
        if not 0 <= n < pool.count or take.shared >= pool.devices:
            raise NodeConflict(f"pool {pool.name!r} has no node {n} or accelerator {take.shared}")
        free = self._free(n)
        devices = free[0] - sign * take.devices
        before = after = None
        if take.shared >= 0:
            before = self._shared.get(n, {}).get(take.shared)
            if before is None:
                devices -= sign  # a shared accelerator is no longer a whole free one
            after = (MILLI if before is None else before) - sign * take.milli
            if after == MILLI:
                devices += 1  # whole again
            if not 0 <= after <= MILLI:
                raise NodeConflict(f"pool {pool.name!r} node {n}: accelerator {take.shared}")
        now = (devices, free[1] - sign * take.cpu_m, free[2] - sign * take.mem_mib)
        if not all(0 <= amount <= whole for amount, whole in zip(now, self._full, strict=True)):
            raise NodeConflict(f"pool {pool.name!r} node {n}: not enough free for {take}")
        self._by_units[self._units_of(free)] -= 1
        self._by_units[self._units_of(now)] += 1
        if now == self._full:
            self._used.pop(n, None)
        else:
            self._used[n] = now
        if pool.model is not None:
            shape = (take.devices // takes, take.milli // takes if take.shared >= 0 else 0)
            held = self._held.get(shape, 0) + sign * takes
            if held > 0:
                self._held[shape] = held
            else:
                self._held.pop(shape, None)
        if after is not None:
            self._count_shared(before, -1)
            on_node = self._shared.setdefault(n, {})
            if after == MILLI:
                del on_node[take.shared]
                if not on_node:
                    del self._shared[n]
            else:
                on_node[take.shared] = after
                self._count_shared(after, 1)

    def copy(self) -> "NodeState":
        """A state of the same pool with the same takes, changed apart from this one."""
        other = NodeState.__new__(NodeState)
        other.pool, other._full = self.pool, self._full
        other._used = dict(self._used)
        other._shared = {n: dict(on_node) for n, on_node in self._shared.items()}
        other._by_units = list(self._by_units)
        other._shared_free = dict(self._shared_free)
        other._held = dict(self._held)
        return other

    def take_or_fill(self, node: int, devices: int, cpu_m: int, mem_mib: int) -> None:
        """Take `devices` whole accelerators, `cpu_m` and `mem_mib` of `node`; when it has not
        that much free, everything it has free instead (`fill`)."""
        free = self._free(node)
        if devices > free[0] or cpu_m > free[1] or mem_mib > free[2]:
            self.fill(node)
        else:
            self.apply(NodeTake(-1, node, devices, -1, 0, cpu_m, mem_mib))

    def take_share_or_fill(self, node: int, device: int, milli: int) -> None:
        """Take `milli` thousandths of accelerator `device` of `node` as a share (a whole
        free accelerator becoming shared); when it has not that much left, or is not shared
        and the node has no whole accelerator free, everything the node has free instead
        (`fill`)."""
        left = self._shared.get(node, {}).get(device)
        if left is None:
            left = MILLI if self._free(node)[0] >= 1 else 0
        if milli > left:
            self.fill(node)
        elif milli > 0:
            self.apply(NodeTake(-1, node, 0, device, milli, 0, 0))

    def fill(self, node: int) -> None:
        """Take everything still free on `node` (its whole accelerators, what its shared ones
        have left, its CPU and memory), so that no gang fits it."""
        for device, left in list(self._shared.get(node, {}).items()):
            if left:
                self.apply(NodeTake(-1, node, 0, device, left, 0, 0))
        free = self._free(node)
        self.apply(NodeTake(-1, node, free[0], -1, 0, free[1], free[2]))

    def _count_shared(self, free: int | None, change: int) -> None:
        if free:
            left = self._shared_free.get(free, 0) + change
            if left:
                self._shared_free[free] = left
            else:
                del self._shared_free[free]

    def pick(self, gang: Gang, *, pool_index: int, mix: Mix = NO_MIX) -> list[NodeTake] | None:
        """The takes of `gang` on this pool's nodes, chosen against `mix` (module docstring),
        or None when it does not fit. Nothing is taken: `apply` the result."""
        pool = self.pool
        if not gang.suits(pool):
            return None
        if gang.milli:
            return self._pick_fraction(gang, pool_index, mix)
        need = gang.units(pool)
        if sum(self._by_units[need:]) < gang.nodes:
            return None

        def holds(free: tuple[int, int, int]) -> bool:
            return (
                self._units_of(free) >= need and free[1] >= gang.cpu_m and free[2] >= gang.mem_mib
            )

        # By level of units free, in the mix's order; within a level, in node order. Whole
        # nodes are the last level's: the nodes in use with all units free and the untouched.
        full = self._units_of(self._full)
        by_level: dict[int, list[int]] = {}
        for n, free in sorted(self._used.items()):
            if holds(free):
                by_level.setdefault(self._units_of(free), []).append(n)
        chosen: list[int] = []
        for level, _ in mix.levels(need, full):
            if level < full:
                chosen += by_level.get(level, [])[: gang.nodes - len(chosen)]
            elif holds(self._full):
                whole_in_use = set(by_level.get(full, ()))
                for n in range(pool.count):
                    if len(chosen) == gang.nodes:
                        break
                    if n not in self._used or n in whole_in_use:
                        chosen.append(n)
            else:
                chosen += by_level.get(full, [])[: gang.nodes - len(chosen)]
            if len(chosen) == gang.nodes:
                return [
                    NodeTake(pool_index, n, gang.devices, -1, 0, gang.cpu_m, gang.mem_mib)
                    for n in sorted(chosen)
                ]
        return None

    def _pick_fraction(self, gang: Gang, pool_index: int, mix: Mix) -> list[NodeTake] | None:
        def roomy(free: tuple[int, int, int]) -> bool:
            return free[1] >= gang.cpu_m and free[2] >= gang.mem_mib

        options = [
            (mix.shared_growth(left, gang.milli), 0, left, n, device)
            for n, on_node in self._shared.items()
            for device, left in on_node.items()
            if left >= gang.milli and roomy(self._free(n))
        ]
        whole = [(f[0], n) for n, f in self._used.items() if f[0] >= 1 and roomy(f)]
        if self._full[0] >= 1 and roomy(self._full):
            untouched = next((n for n in range(self.pool.count) if n not in self._used), None)
            if untouched is not None:
                whole.append((self._full[0], untouched))
        options += [(mix.opened_growth(k, gang.milli), 1, k, n, -1) for k, n in whole]
        if not options:
            return None
        _, _, _, n, device = min(options)
        if device < 0:
            device = min(set(range(self.pool.devices)) - set(self._shared.get(n, {})))
        return [NodeTake(pool_index, n, 0, device, gang.milli, gang.cpu_m, gang.mem_mib)]

    @property
    def held(self) -> Held:
        """The shapes held on the pool's nodes, as its summary shows them."""
        return tuple((d, m, n) for (d, m), n in sorted(self._held.items()))

    def summary(self) -> PoolSummary:
        """The pool's `PoolSummary` now (`PoolSummary.empty`'s object when nothing is
        taken)."""
        if not self._used and not self._shared and not self._held:
            return PoolSummary.empty(self.pool)
        return PoolSummary(
            tuple(self._by_units), tuple(sorted(self._shared_free.items())), self.held
        )


def site_mix(pools: Sequence[Pool], helds: Sequence[Held], gang: Gang) -> Mix:
    """The mix a gang is placed against on a site of `pools` (with the shapes held on each):
    the shapes held on the pools of its accelerator model; none for a gang of no
    accelerator."""
    if gang.model is None:
        return NO_MIX
    return Mix.of(held for pool, held in zip(pools, helds, strict=True) if pool.model == gang.model)


def pool_order(
    pools: Sequence[Pool], summaries: Sequence[PoolSummary], gang: Gang, mix: Mix
) -> list[tuple[int, PoolSummary]]:
    """The pools whose summaries `gang` fits, by the rank of its take against `mix` (least
    growth of fragmentation, then best fit: `Rank`), then in their order: each pool's index
    and its summary less the gang."""
    ranked = []
    for i, (pool, summary) in enumerate(zip(pools, summaries, strict=True)):
        if summary.fits(gang, pool):
            taken, rank = summary.taken(gang, pool, mix)
            ranked.append((rank, i, taken))
    ranked.sort(key=lambda r: (r[0], r[1]))
    return [(i, taken) for _, i, taken in ranked]


def take_on(
    pools: Sequence[Pool], summaries: Sequence[PoolSummary], gang: Gang
) -> tuple[PoolSummary, ...] | None:
    """The summaries of a site's `pools` less `gang`, taken from the pool `pick_on` takes it
    from; None when it fits none."""
    mix = site_mix(pools, [summary.held for summary in summaries], gang)
    order = pool_order(pools, summaries, gang, mix)
    if not order:
        return None
    i, taken = order[0]
    return (*summaries[:i], taken, *summaries[i + 1 :])


def pick_on(states: Sequence[NodeState], gang: Gang) -> list[NodeTake] | None:
    """The takes of `gang` on a site's pools (`states`, in order): on the pool `pool_order`
    puts first whose nodes hold it, against the site's mix; None when none does."""
    pools = [state.pool for state in states]
    suited = [i for i, pool in enumerate(pools) if gang.suits(pool)]
    mix = site_mix(pools, [state.held for state in states], gang) if suited else NO_MIX
    if len(suited) > 1:
        summaries = [state.summary() for state in states]
        suited = [i for i, _ in pool_order(pools, summaries, gang, mix)]
    for i in suited:
        picked = states[i].pick(gang, pool_index=i, mix=mix)
        if picked is not None:
            return picked
    return None


def planned_on(
    states: Sequence[NodeState], gang: Gang, planned: Sequence[NodeTake]
) -> list[NodeTake] | None:
    """`planned` (the takes a plan chose for `gang`), when they are its takes on a site's
    pools (`states`): on one pool that suits it, its share on each of as many distinct nodes
    as it has, and the nodes hold them now; else None. Nothing is taken: `apply` the
    result."""
    if len(planned) != gang.nodes or len({(t.pool, t.node) for t in planned}) != gang.nodes:
        return None
    pool = planned[0].pool
    if not 0 <= pool < len(states) or not gang.suits(states[pool].pool):
        return None
    share = (gang.devices, gang.milli, gang.cpu_m, gang.mem_mib)
    for take in planned:
        if take.pool != pool or (take.devices, take.milli, take.cpu_m, take.mem_mib) != share:
            return None
        if (take.shared >= 0) != bool(gang.milli):
            return None
    if not take_all(states, planned):
        return None
    for take in planned:
        states[pool].apply(take, sign=-1)
    return list(planned)


def take_all(states: Sequence[NodeState], takes: Sequence[NodeTake]) -> bool:
    """Apply every take of `takes` to its pool's state of `states`, or none: False, changing
    nothing, when one would leave a node's free amounts outside its shape."""
    done: list[NodeTake] = []
    try:
        for take in takes:
            states[take.pool].apply(take)
            done.append(take)
    except NodeConflict:
        for take in done:
            states[take.pool].apply(take, sign=-1)
        return False
    return True


def fits_on(pools: Sequence[Pool], summaries: Sequence[PoolSummary], gang: Gang) -> bool:
    """Whether `gang` fits one of `pools` (with their `summaries`)."""
    return any(s.fits(gang, p) for p, s in zip(pools, summaries, strict=True))
