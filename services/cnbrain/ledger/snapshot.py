"""A consistent, read-only view of free capacity taken at the start of a placement cycle."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from cnbrain.ledger.nodes import Gang, NodeState, Pool, PoolSummary, take_on
from cnbrain.ledger.reservation import ComputeClaim, Reservation, gang_held
from cnbrain.netmap.arrays import IntArray, MapArrays

SiteNodes = Mapping[int, tuple[PoolSummary, ...]]
"""Per site index, the summary of each of its node pools (`site_pools`), for sites with pools;
a site with nothing taken on its pools holds `all_free`'s own tuple (so `is` tells it)."""


@lru_cache(maxsize=8)
def site_pools(arrays: MapArrays) -> Mapping[int, tuple[Pool, ...]]:
    """The node pools of each site of `arrays`' map that describes its nodes, in the
    ledger's units, by site index."""
    return MappingProxyType(
        {
            i: tuple(Pool.of(pool) for pool in site.node_pools)
            for i, site in enumerate(arrays.map.sites)
            if site.node_pools
        }
    )


@lru_cache(maxsize=4096)
def suited_sites(arrays: MapArrays, gang: Gang) -> npt.NDArray[np.bool_]:
    """Per site of `arrays`' map: whether it has no node pools, or one whose shape and size
    can hold `gang` (read-only)."""
    out = np.ones(arrays.n_sites, dtype=bool)
    for site, pools in site_pools(arrays).items():
        out[site] = any(gang.suits(pool) for pool in pools)
    out.setflags(write=False)
    return out


@lru_cache(maxsize=8)
def all_free(arrays: MapArrays) -> SiteNodes:
    """Every node pool of `arrays`' map with nothing taken."""
    return MappingProxyType(
        {i: tuple(map(PoolSummary.empty, pools)) for i, pools in site_pools(arrays).items()}
    )


def summaries_of(
    arrays: MapArrays, site: int, states: Sequence[NodeState]
) -> tuple[PoolSummary, ...]:
    """The summaries of site `site`'s pools in `states`: `all_free`'s own tuple when nothing
    is taken on them (so that `is` tells an untouched site)."""
    summaries = tuple(state.summary() for state in states)
    untouched = all_free(arrays)[site]
    return (
        untouched if all(a is b for a, b in zip(summaries, untouched, strict=True)) else summaries
    )


@dataclass(frozen=True, slots=True, eq=False)
class Snapshot:
    """Free capacity per site and residual bandwidth per link at ledger `version`, and
    what is free on the node pools of the sites that have them (`nodes`).

    The arrays are read-only; a cycle that needs to track its own tentative use copies them.
    """

    arrays: MapArrays
    version: int
    free_cpu_m: IntArray
    free_mem_mib: IntArray
    free_storage_gib: IntArray
    free_acc: IntArray
    free_acc_by_model: IntArray
    residual_mbps: IntArray
    nodes: SiteNodes

    @classmethod
    def of(
        cls,
        arrays: MapArrays,
        *,
        version: int,
        used_cpu_m: IntArray,
        used_mem_mib: IntArray,
        used_storage_gib: IntArray,
        used_acc: IntArray,
        used_mbps: IntArray,
        nodes: SiteNodes | None = None,
    ) -> "Snapshot":
        return cls.of_free(
            arrays,
            version=version,
            free_cpu_m=arrays.cap_cpu_m - used_cpu_m,
            free_mem_mib=arrays.cap_mem_mib - used_mem_mib,
            free_storage_gib=arrays.cap_storage_gib - used_storage_gib,
            free_acc=arrays.cap_acc - used_acc,
            residual_mbps=arrays.link_cap_mbps - used_mbps,
            nodes=nodes,
        )

    @classmethod
    def empty(cls, arrays: MapArrays) -> "Snapshot":
        """A snapshot of a map with nothing reserved."""
        zeros = np.zeros_like
        return cls.of(
            arrays,
            version=0,
            used_cpu_m=zeros(arrays.cap_cpu_m),
            used_mem_mib=zeros(arrays.cap_mem_mib),
            used_storage_gib=zeros(arrays.cap_storage_gib),
            used_acc=zeros(arrays.cap_acc),
            used_mbps=zeros(arrays.link_cap_mbps),
        )

    def adjusted(self, reservation: Reservation, *, taken: bool) -> "Snapshot":
        """A copy of this snapshot with `reservation` taken (or, with taken=False, given back);
        free capacity is kept at or above zero. On a site with node pools, a reservation
        taken takes its gang from the first pool that fits it, as the ledgers choose; one
        given back leaves the pools as they are (a `Reservation` does not say which nodes
        it held), so they show less free than there is until the next read."""
        sign = -1 if taken else 1
        c = reservation.compute
        cpu, mem = self.free_cpu_m.copy(), self.free_mem_mib.copy()
        storage, acc, mbps = (
            self.free_storage_gib.copy(),
            self.free_acc.copy(),
            self.residual_mbps.copy(),
        )
        cpu[c.site] += sign * c.cpu_m
        mem[c.site] += sign * c.mem_mib
        storage[c.site] += sign * c.storage_gib
        if c.acc_milli:
            acc[c.site, c.acc_column] += sign * c.acc_milli
        if reservation.links and reservation.mbps:
            mbps[list(reservation.links)] += sign * reservation.mbps
        return Snapshot.of_free(
            self.arrays,
            version=self.version + 1,
            free_cpu_m=cpu,
            free_mem_mib=mem,
            free_storage_gib=storage,
            free_acc=acc,
            residual_mbps=mbps,
            nodes=self._nodes_less(c) if taken else self.nodes,
        )

    def _nodes_less(self, compute: ComputeClaim) -> SiteNodes:
        """`nodes` with `compute`'s gang taken from its site's pools as the ledgers take it
        (`take_on`; as they are when it fits none, or the site has no pools)."""
        pools = site_pools(self.arrays).get(compute.site)
        if not pools:
            return self.nodes
        gang = gang_held(compute, self.arrays.map.accelerator_models)
        summaries = self.nodes.get(compute.site) or tuple(map(PoolSummary.empty, pools))
        taken = take_on(pools, summaries, gang)
        if taken is None:
            return self.nodes
        return MappingProxyType({**self.nodes, compute.site: taken})

    def less(self, computes: Sequence[ComputeClaim]) -> "Snapshot":
        """A copy of this snapshot with the compute of every claim of `computes` taken (free
        capacity kept at or above zero; node pools as they are), at the same version; this
        snapshot itself when `computes` is empty."""
        if not computes:
            return self
        cpu, mem = self.free_cpu_m.copy(), self.free_mem_mib.copy()
        storage, acc = self.free_storage_gib.copy(), self.free_acc.copy()
        for c in computes:
            cpu[c.site] -= c.cpu_m
            mem[c.site] -= c.mem_mib
            storage[c.site] -= c.storage_gib
            if c.acc_milli and c.acc_column >= 0:
                acc[c.site, c.acc_column] -= c.acc_milli
        return Snapshot.of_free(
            self.arrays,
            version=self.version,
            free_cpu_m=cpu,
            free_mem_mib=mem,
            free_storage_gib=storage,
            free_acc=acc,
            residual_mbps=self.residual_mbps,
            nodes=self.nodes,
        )

    def only_on(self, site: int) -> "Snapshot":
        """A copy of this snapshot with nothing free on any site but `site` (links as they
        are): a decision on it can choose only that site."""
        keep = np.zeros(len(self.free_cpu_m), dtype=bool)
        keep[site] = True
        return self.restricted(sites=keep)

    def restricted(self, *, sites: np.ndarray, links: np.ndarray | None = None) -> "Snapshot":
        """A copy of this snapshot with nothing free on the sites (and links) whose entry in
        the boolean masks `sites` (and `links`) is False."""
        return Snapshot.of_free(
            self.arrays,
            version=self.version,
            free_cpu_m=np.where(sites, self.free_cpu_m, 0),
            free_mem_mib=np.where(sites, self.free_mem_mib, 0),
            free_storage_gib=np.where(sites, self.free_storage_gib, 0),
            free_acc=np.where(sites[:, None], self.free_acc, 0),
            residual_mbps=self.residual_mbps.copy()
            if links is None
            else np.where(links, self.residual_mbps, 0),
            nodes=self.nodes,
        )

    @classmethod
    def of_free(
        cls,
        arrays: MapArrays,
        *,
        version: int,
        free_cpu_m: IntArray,
        free_mem_mib: IntArray,
        free_storage_gib: IntArray,
        free_acc: IntArray,
        residual_mbps: IntArray,
        nodes: SiteNodes | None = None,
    ) -> "Snapshot":
        """A snapshot of the given free capacity (clipped at zero); `nodes` None: every node
        pool with nothing taken."""

        def frozen(values: IntArray) -> IntArray:
            values = np.maximum(values, 0)
            values.setflags(write=False)
            return values

        acc = frozen(free_acc)
        by_model = np.ascontiguousarray(acc.T)
        by_model.setflags(write=False)
        return cls(
            arrays=arrays,
            version=version,
            free_cpu_m=frozen(free_cpu_m),
            free_mem_mib=frozen(free_mem_mib),
            free_storage_gib=frozen(free_storage_gib),
            free_acc=acc,
            free_acc_by_model=by_model,
            residual_mbps=frozen(residual_mbps),
            nodes=all_free(arrays) if nodes is None else nodes,
        )
