"""A region's part of the map that the national brain's registry refuses for now (it retires
a site the national brain still holds a reservation on) is applied again at the region's
later summaries, once due, and the site is retired once the reservation is released; on
PostgreSQL and SQLite."""

import pytest

from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.map_delta import MapDelta, RegionPart
from cnbrain.national.map_sync import RETRY_REFUSED_S, MapSync
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.storage import ledger_store
from tests.databases import Sessions
from tests.storage.held_reservations import hold

pytestmark = pytest.mark.asyncio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _without_site(cmap: ComputeNetworkMap, site_id: str) -> ComputeNetworkMap:
    document = cmap.document
    return ComputeNetworkMap.from_document(
        document.model_copy(
            update={
                "sites": [s for s in document.sites if s.id != site_id],
                "links": [link for link in document.links if site_id not in (link.a, link.b)],
            }
        )
    )


async def test_a_refused_part_is_applied_again_once_due_until_it_passes(
    sessions: Sessions, seeded: MapArrays
) -> None:
    live_map = LiveMap(sessions, owner=NATIONAL_OWNER, restrict=False)
    await live_map.reload()
    clock = Clock()
    sync = MapSync(sessions=sessions, live_map=live_map, clock=clock)
    cmap = live_map.map
    site = cmap.sites[1]
    region = cmap.provinces[site.province].region
    provinces = frozenset(c for c, p in cmap.provinces.items() if p.region == region)
    held = await hold(sessions, seeded, 1)
    sites, links = RegionPart.of(_without_site(cmap, site.id), region).documents()

    refused = await sync.apply(region, provinces, sites, links)
    assert isinstance(refused, str) and "holds 1 reservation" in refused, refused
    assert site.id in live_map.map.site_index
    assert await sync.retry(region) is None  # not due yet
    clock.now += RETRY_REFUSED_S
    again = await sync.retry(region)
    assert isinstance(again, str) and "holds 1 reservation" in again, again

    async with sessions.begin() as session:
        await ledger_store.release(session, reservation_id=held)
    assert await sync.retry(region) is None  # not due: the last retry set the next one
    clock.now += RETRY_REFUSED_S
    applied = await sync.retry(region)
    assert isinstance(applied, MapDelta) and applied.retired_sites == [site.id], applied
    assert site.id not in live_map.map.site_index
    clock.now += RETRY_REFUSED_S
    assert await sync.retry(region) is None  # nothing kept once applied


async def test_a_part_sent_after_a_refused_one_replaces_it(
    sessions: Sessions, seeded: MapArrays
) -> None:
    live_map = LiveMap(sessions, owner=NATIONAL_OWNER, restrict=False)
    await live_map.reload()
    clock = Clock()
    sync = MapSync(sessions=sessions, live_map=live_map, clock=clock)
    cmap = live_map.map
    site = cmap.sites[1]
    region = cmap.provinces[site.province].region
    provinces = frozenset(c for c, p in cmap.provinces.items() if p.region == region)
    await hold(sessions, seeded, 1)
    sites, links = RegionPart.of(_without_site(cmap, site.id), region).documents()
    assert isinstance(await sync.apply(region, provinces, sites, links), str)

    unchanged = await sync.apply(region, provinces, *RegionPart.of(cmap, region).documents())
    assert isinstance(unchanged, MapDelta) and unchanged.is_empty()
    clock.now += RETRY_REFUSED_S
    assert await sync.retry(region) is None
    assert site.id in live_map.map.site_index
