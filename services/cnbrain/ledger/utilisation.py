"""How much of each site and link a snapshot shows in use: as shares of capacity
(`site_utilisation`, `link_utilisation`, for the simulator's figures), and as what the
brain shows of the sites and links it owns (`site_uses`, `link_uses`: capacity, free and
utilisation in the units people read, for the REST API's capacity reads, the metrics and
the console, which all show the same figures).

In those views what is free is never below 0 nor above the capacity (an operator's report of
use outside the brain may take a site's free amount below 0), what is used is the capacity
less what is free, and a utilisation is a share from 0 to 1 (`site_shares`, `link_shares`).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from cnbrain.domain.network import Link
from cnbrain.domain.site import Site
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import (
    FloatArray,
    mbps_to_gbps,
    mib_to_gib,
    milli_to_accelerators,
    millicores_to_cores,
)

Owned = npt.NDArray[np.bool_]
"""One flag per site (or link) of a map: whether the brain owns it."""


def site_utilisation(snap: Snapshot) -> FloatArray:
    """Per site: the highest share of its CPU, memory, storage or any accelerator model in use
    (0 for a resource the site does not have)."""
    a = snap.arrays
    shares = []
    for cap, free in (
        (a.cap_cpu_m, snap.free_cpu_m),
        (a.cap_mem_mib, snap.free_mem_mib),
        (a.cap_storage_gib, snap.free_storage_gib),
    ):
        shares.append(np.where(cap > 0, (cap - free) / np.maximum(cap, 1), 0.0))
    if a.cap_acc.shape[1]:
        acc = np.where(a.cap_acc > 0, (a.cap_acc - snap.free_acc) / np.maximum(a.cap_acc, 1), 0.0)
        shares.append(acc.max(axis=1))
    return np.asarray(np.max(np.stack(shares), axis=0), dtype=np.float64)


def link_utilisation(snap: Snapshot) -> FloatArray:
    """Per link: reserved bandwidth / capacity."""
    a = snap.arrays
    return np.asarray((a.link_cap_mbps - snap.residual_mbps) / a.link_cap_mbps, dtype=np.float64)


def site_shares(snap: Snapshot) -> FloatArray:
    """Per site: `site_utilisation` within 0 to 1."""
    return np.asarray(np.clip(site_utilisation(snap), 0.0, 1.0), dtype=np.float64)


def link_shares(snap: Snapshot) -> FloatArray:
    """Per link: the share of its bandwidth reserved, within 0 to 1 (0 for a link without
    bandwidth)."""
    cap = snap.arrays.link_cap_mbps
    free = np.clip(snap.residual_mbps, 0, cap)
    return np.asarray(np.where(cap > 0, (cap - free) / np.maximum(cap, 1), 0.0), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class SiteAmounts:
    """Amounts of one site: cores, GiB of memory and of storage, and accelerators by model
    (the models the site has, in the map's order)."""

    cpu_cores: float
    memory_gib: float
    storage_gib: float
    accelerators: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class SiteUse:
    """What a site holds (`capacity`), has free now (`free`) and the highest share of any of
    its resources in use (`utilisation`)."""

    site: Site
    capacity: SiteAmounts
    free: SiteAmounts
    utilisation: float


@dataclass(frozen=True, slots=True)
class LinkUse:
    """A link's bandwidth in Gbps: its capacity, what is reserved and free now, and the share
    reserved."""

    link: Link
    capacity_gbps: float
    used_gbps: float
    free_gbps: float
    utilisation: float


def site_uses(snap: Snapshot, *, owned: Owned) -> list[SiteUse]:
    """The sites whose flag in `owned` is set, in map order, as the module docstring says."""
    a = snap.arrays
    models = a.map.accelerator_models
    shares = site_shares(snap)
    uses = []
    for i in np.flatnonzero(owned).tolist():
        held = [k for k in range(len(models)) if a.cap_acc[i, k] > 0]
        uses.append(
            SiteUse(
                site=a.map.sites[i],
                capacity=SiteAmounts(
                    cpu_cores=millicores_to_cores(int(a.cap_cpu_m[i])),
                    memory_gib=mib_to_gib(int(a.cap_mem_mib[i])),
                    storage_gib=float(a.cap_storage_gib[i]),
                    accelerators=MappingProxyType(
                        {models[k]: milli_to_accelerators(int(a.cap_acc[i, k])) for k in held}
                    ),
                ),
                free=SiteAmounts(
                    cpu_cores=millicores_to_cores(
                        _within(int(snap.free_cpu_m[i]), int(a.cap_cpu_m[i]))
                    ),
                    memory_gib=mib_to_gib(
                        _within(int(snap.free_mem_mib[i]), int(a.cap_mem_mib[i]))
                    ),
                    storage_gib=float(
                        _within(int(snap.free_storage_gib[i]), int(a.cap_storage_gib[i]))
                    ),
                    accelerators=MappingProxyType(
                        {
                            models[k]: milli_to_accelerators(
                                _within(int(snap.free_acc[i, k]), int(a.cap_acc[i, k]))
                            )
                            for k in held
                        }
                    ),
                ),
                utilisation=float(shares[i]),
            )
        )
    return uses


def _within(free: int, capacity: int) -> int:
    return min(max(free, 0), capacity)


def link_uses(snap: Snapshot, *, owned: Owned) -> list[LinkUse]:
    """The links whose flag in `owned` is set, in map order, as the module docstring says."""
    a = snap.arrays
    shares = link_shares(snap)
    uses = []
    for j in np.flatnonzero(owned).tolist():
        capacity = int(a.link_cap_mbps[j])
        free = min(max(int(snap.residual_mbps[j]), 0), capacity)
        uses.append(
            LinkUse(
                link=a.map.links[j],
                capacity_gbps=mbps_to_gbps(capacity),
                used_gbps=mbps_to_gbps(capacity - free),
                free_gbps=mbps_to_gbps(free),
                utilisation=float(shares[j]),
            )
        )
    return uses
