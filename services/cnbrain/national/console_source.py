"""What the national brain's console shows (`cnbrain.console`): the whole country's map as
the national brain holds it, the load of the backbone links from its own ledger, and what
each region's latest summary says (the load of each of its sites, its accelerators, the load
of its provinces' gateway links), as old as that summary. The sites of a region without a
summary yet have no load here. Callers authenticate with the federation's API keys
(`national.tenancy` keeps them)."""

import time
from collections.abc import Sequence

from cnbrain.console.map_view import loads_by_id, map_view, snapshot_loads
from cnbrain.console.views import AcceleratorLoad, Brain, MapView, Page, RegionMark, Viewer
from cnbrain.domain.accelerators import MILLI
from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.domain.tenancy import STAFF
from cnbrain.national.composition import NationalBrain
from cnbrain.national.regions import Region
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.storage import tenants

PAGES: tuple[Page, ...] = ("map",)
LOAD_NOTE = (
    "sites from their regions' latest summaries, as each region's ledger held them when it "
    "sent its summary (a region sends one every summary_interval_s, 2 s by default; the age "
    "of each region's latest is in the table of regions; the sites of a region without one "
    "are not known here); backbone links from the national brain's ledger; the rings of "
    "provinces show the load of their gateway links, and the regions their accelerators, "
    "from the same summaries"
)


class NationalConsole:
    """The console's source on the running national brain `brain`."""

    brain: Brain = "national"
    pages: Sequence[Page] = PAGES

    def __init__(self, brain: NationalBrain) -> None:
        self._brain = brain

    def region(self) -> str | None:
        return None

    def map_name(self) -> str:
        return self._brain.live_map.map.name

    async def viewer(self, token: str) -> Viewer | None:
        async with self._brain.sessions() as session:
            found = await tenants.authenticate(session, token=token)
        if found is None:
            return None
        user = found[0]
        return Viewer(user=user.id, role=user.role, tenant=user.tenant_id, staff=user.role in STAFF)

    async def map_view(self) -> MapView:
        snapshot = (await self._brain.live_map.snapshot())[0]
        cmap = snapshot.arrays.map
        owned = self._brain.live_map.ownership
        _, link_load = snapshot_loads(snapshot, sites=owned.sites, links=owned.links)
        known = {region.id: region for region in self._brain.directory.all()}
        site_load = loads_by_id(
            [site.id for site in cmap.sites],
            {
                site: load
                for region in known.values()
                if region.summary is not None
                for site, load in region.site_loads.items()
            },
        )
        return map_view(
            cmap,
            owner=NATIONAL_OWNER,
            site_load=site_load,
            link_load=link_load,
            load_note=LOAD_NOTE,
            regions=_regions(cmap, known),
            gateway_load={
                gateway.province: gateway.utilisation
                for region in known.values()
                if region.summary is not None
                for gateway in region.summary.gateways
            },
        )


def _regions(cmap: ComputeNetworkMap, known: dict[str, Region]) -> list[RegionMark]:
    """Every region of `cmap`, with what the directory `known` holds of it."""
    now = time.monotonic()
    marks = []
    for region_id, region in cmap.regions.items():
        found = known.get(region_id)
        summary = None if found is None else found.summary
        marks.append(
            RegionMark(
                id=region_id,
                name=region.name,
                owned=False,
                registered=found is not None,
                summary_age_s=None if found is None or summary is None else now - found.summary_at,
                accelerators=None
                if summary is None
                else [
                    AcceleratorLoad(model=a.model, free=a.free / MILLI, total=a.total / MILLI)
                    for a in summary.accelerators
                ],
            )
        )
    return marks
