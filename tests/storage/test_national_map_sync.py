"""A region's part of the map that the national brain's registry refuses for now (it retires
a site the national brain still holds a reservation on) is applied again at the region's
later summaries, once due, and the site is retired once the reservation is released; on
PostgreSQL and SQLite."""

from dataclasses import dataclass

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


@dataclass
class Refusing:
    """A national brain's map sync whose clock the test moves, and a part of `region` that
    retires `site_id` while the registry holds reservation `held` on it."""

    sync: MapSync
    live_map: LiveMap
    clock: Clock
    region: str
    provinces: frozenset[str]
    part: tuple[list[str], list[str]]
    site_id: str
    held: str


async def _refusing(sessions: Sessions, seeded: MapArrays) -> Refusing:
    live_map = LiveMap(sessions, owner=NATIONAL_OWNER, restrict=False)
    await live_map.reload()
    clock = Clock()
    cmap = live_map.map
    site = cmap.sites[1]
    region = cmap.provinces[site.province].region
    provinces = frozenset(c for c, p in cmap.provinces.items() if p.region == region)
    held = await hold(sessions, seeded, 1)
    return Refusing(
        sync=MapSync(sessions=sessions, live_map=live_map, clock=clock),
        live_map=live_map,
        clock=clock,
        region=region,
        provinces=provinces,
        part=RegionPart.of(_without_site(cmap, site.id), region).documents(),
        site_id=site.id,
        held=held,
    )


async def test_a_refused_part_is_applied_again_once_due_until_it_passes(
    sessions: Sessions, seeded: MapArrays
) -> None:
    it = await _refusing(sessions, seeded)
    sync, region = it.sync, it.region

    refused = await sync.apply(region, it.provinces, *it.part)
    assert isinstance(refused, str) and "holds 1 reservation" in refused, refused
    assert it.site_id in it.live_map.map.site_index
    assert await sync.retry(region) is None  # not due yet
    it.clock.now += RETRY_REFUSED_S
    again = await sync.retry(region)
    assert isinstance(again, str) and "holds 1 reservation" in again, again

    async with sessions.begin() as session:
        await ledger_store.release(session, reservation_id=it.held)
    assert await sync.retry(region) is None  # not due: the last retry set the next one
    it.clock.now += RETRY_REFUSED_S
    applied = await sync.retry(region)
    assert isinstance(applied, MapDelta) and applied.retired_sites == [it.site_id], applied
    assert it.site_id not in it.live_map.map.site_index
    it.clock.now += RETRY_REFUSED_S
    assert await sync.retry(region) is None  # nothing kept once applied


async def test_a_part_sent_after_a_refused_one_replaces_it(
    sessions: Sessions, seeded: MapArrays
) -> None:
    it = await _refusing(sessions, seeded)
    assert isinstance(await it.sync.apply(it.region, it.provinces, *it.part), str)

    whole = RegionPart.of(it.live_map.map, it.region).documents()
    unchanged = await it.sync.apply(it.region, it.provinces, *whole)
    assert isinstance(unchanged, MapDelta) and unchanged.is_empty()
    it.clock.now += RETRY_REFUSED_S
    assert await it.sync.retry(it.region) is None
    assert it.site_id in it.live_map.map.site_index
