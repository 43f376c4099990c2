"""What the sites and links this brain owns hold and have free now (`GET /v1/capacity/sites`,
`GET /v1/capacity/links`): capacity from the map, free from the ledger's snapshot less the
room holds active now (what a new request may take), as `ledger.utilisation` computes them
for the metrics and the console too."""

from cnbrain.federation.live_map import LiveMap
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.ledger.utilisation import Owned, SiteAmounts, link_uses, site_uses
from cnbrain.regional.schemas import Amounts, LinkUseView, SiteCapacityView


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


def site_views(snapshot: Snapshot, *, owned: Owned) -> list[SiteCapacityView]:
    """The views of the sites whose flag in `owned` (a boolean per site) is set."""
    provinces = snapshot.arrays.map.provinces
    return [
        SiteCapacityView(
            id=use.site.id,
            name=use.site.name,
            province=use.site.province,
            region=provinces[use.site.province].region,
            kind=use.site.kind.value,
            capacity=_amounts(use.capacity),
            free=_amounts(use.free),
            utilisation=use.utilisation,
        )
        for use in site_uses(snapshot, owned=owned)
    ]


def link_views(snapshot: Snapshot, *, owned: Owned) -> list[LinkUseView]:
    """The views of the links whose flag in `owned` (a boolean per link) is set."""
    return [
        LinkUseView(
            id=use.link.id,
            a=use.link.a,
            b=use.link.b,
            layer=use.link.layer.value,
            owner=use.link.owner,
            latency_ms=use.link.latency_ms,
            capacity_gbps=use.capacity_gbps,
            used_gbps=use.used_gbps,
            free_gbps=use.free_gbps,
            utilisation=use.utilisation,
        )
        for use in link_uses(snapshot, owned=owned)
    ]


def _amounts(amounts: SiteAmounts) -> Amounts:
    return Amounts(
        cpu_cores=amounts.cpu_cores,
        memory_gib=amounts.memory_gib,
        storage_gib=amounts.storage_gib,
        accelerators=dict(amounts.accelerators),
    )
