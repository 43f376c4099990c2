"""What the sites and links this brain owns hold and have free now (`GET /v1/capacity/sites`,
`GET /v1/capacity/links`): capacity from the map, free from the ledger's snapshot less the
room holds active now (what a new request may take)."""

import numpy as np
import numpy.typing as npt

from cnbrain.federation.live_map import LiveMap
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.ledger.utilisation import link_utilisation, site_utilisation
from cnbrain.netmap.arrays import milli_to_accelerators
from cnbrain.regional.schemas import Amounts, LinkUseView, SiteCapacityView

MBPS_PER_GBPS = 1000


class CapacityReads:
    """Reads of the free capacity of what this brain owns (a standalone brain: the whole
    map; a regional brain: its region's sites and the links it owns)."""

    def __init__(self, live_map: LiveMap) -> None:
        self._live_map = live_map

    async def sites(self) -> list[SiteCapacityView]:
        """Every site it owns, in map order, with its capacity and free amounts (never
        below zero)."""
        snapshot, _ = await self._live_map.snapshot()
        return site_views(snapshot, owned=self._live_map.ownership.sites)

    async def links(self) -> list[LinkUseView]:
        """Every link it owns, in map order, with its reserved and free bandwidth."""
        snapshot, _ = await self._live_map.snapshot()
        return link_views(snapshot, owned=self._live_map.ownership.links)


def site_views(snapshot: Snapshot, *, owned: npt.NDArray[np.bool_]) -> list[SiteCapacityView]:
    """The views of the sites whose flag in `owned` (a boolean per site) is set."""
    arrays = snapshot.arrays
    cmap = arrays.map
    models = cmap.accelerator_models
    shares = site_utilisation(snapshot)
    views = []
    for i, site in enumerate(cmap.sites):
        if not owned[i]:
            continue
        held = [k for k, _ in enumerate(models) if arrays.cap_acc[i, k] > 0]
        views.append(
            SiteCapacityView(
                id=site.id,
                name=site.name,
                province=site.province,
                region=cmap.provinces[site.province].region,
                kind=site.kind.value,
                capacity=Amounts(
                    cpu_cores=arrays.cap_cpu_m[i] / 1000,
                    memory_gib=arrays.cap_mem_mib[i] / 1024,
                    storage_gib=float(arrays.cap_storage_gib[i]),
                    accelerators={
                        models[k]: milli_to_accelerators(int(arrays.cap_acc[i, k])) for k in held
                    },
                ),
                free=Amounts(
                    cpu_cores=max(int(snapshot.free_cpu_m[i]), 0) / 1000,
                    memory_gib=max(int(snapshot.free_mem_mib[i]), 0) / 1024,
                    storage_gib=float(max(int(snapshot.free_storage_gib[i]), 0)),
                    accelerators={
                        models[k]: milli_to_accelerators(max(int(snapshot.free_acc[i, k]), 0))
                        for k in held
                    },
                ),
                utilisation=min(max(float(shares[i]), 0.0), 1.0),
            )
        )
    return views


def link_views(snapshot: Snapshot, *, owned: npt.NDArray[np.bool_]) -> list[LinkUseView]:
    """The views of the links whose flag in `owned` (a boolean per link) is set."""
    arrays = snapshot.arrays
    shares = link_utilisation(snapshot)
    views = []
    for j, link in enumerate(arrays.map.links):
        if not owned[j]:
            continue
        capacity = int(arrays.link_cap_mbps[j])
        free = min(max(int(snapshot.residual_mbps[j]), 0), capacity)
        views.append(
            LinkUseView(
                id=link.id,
                a=link.a,
                b=link.b,
                layer=link.layer.value,
                owner=link.owner,
                latency_ms=link.latency_ms,
                capacity_gbps=capacity / MBPS_PER_GBPS,
                used_gbps=(capacity - free) / MBPS_PER_GBPS,
                free_gbps=free / MBPS_PER_GBPS,
                utilisation=min(max(float(shares[j]), 0.0), 1.0),
            )
        )
    return views
