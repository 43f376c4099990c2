"""The map registry: seeding, loading back, and registering, updating and retiring sites and
links, each change checked as a whole map."""

import asyncio

import pytest
from sqlalchemy import select

from cnbrain.domain.network import Link
from cnbrain.domain.site import Site
from cnbrain.netmap.arrays import MapArrays, cores_to_millicores, gbps_to_mbps, gib_to_mib
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.document import MapDocument
from cnbrain.storage import ledger_store, registry
from cnbrain.storage.errors import RegistryError, UnknownItem
from cnbrain.storage.models import LinkCapacity, SiteAccelerators, SiteCapacity
from tests.databases import Sessions
from tests.storage.held_reservations import attachments, hold

pytestmark = pytest.mark.asyncio


def _clone(document: MapDocument, site: Site, new_id: str) -> tuple[Site, list[Link]]:
    """A copy of `site` under `new_id`, attached to the same nodes."""
    links = [
        link.model_copy(update={"a": new_id} if link.a == site.id else {"b": new_id})
        for link in attachments(document, site.id)
    ]
    return site.model_copy(update={"id": new_id, "name": new_id}), links


async def _document(sessions: Sessions) -> MapDocument:
    async with sessions() as session:
        return await registry.load_document(session)


async def test_seeded_map_loads_back_equal(sessions: Sessions, china: MapDocument) -> None:
    async with sessions.begin() as session:
        assert await registry.is_empty(session)
        await registry.seed_map(session, document=china)
    async with sessions() as session:
        assert not await registry.is_empty(session)
        assert await registry.map_version(session) == 1
        loaded = await registry.load_document(session)
    assert loaded == china
    original, again = (ComputeNetworkMap.from_document(d) for d in (china, loaded))
    assert again.sites == original.sites
    assert again.links == original.links
    assert dict(again.provinces) == dict(original.provinces)
    assert again.accelerator_models == original.accelerator_models
    before, after = MapArrays.build(original), MapArrays.build(again)
    for column in ("cap_cpu_m", "cap_mem_mib", "cap_storage_gib", "cap_acc", "link_cap_mbps"):
        assert (getattr(before, column) == getattr(after, column)).all()


async def test_seed_if_empty_seeds_once_under_concurrency(
    sessions: Sessions, china: MapDocument
) -> None:
    async def seed() -> bool:
        async with sessions.begin() as session:
            return await registry.seed_if_empty(session, document=china)

    assert sorted(await asyncio.gather(seed(), seed(), seed())) == [False, False, True]
    assert await _document(sessions) == china


async def test_capacity_rows_hold_the_caps_in_integer_units(
    sessions: Sessions, seeded: MapArrays
) -> None:
    site = seeded.map.sites[0]
    link = seeded.map.links[0]
    async with sessions() as session:
        caps = await session.get(SiteCapacity, site.id)
        pools = {
            row.model: row.cap
            for row in await session.scalars(
                select(SiteAccelerators).where(SiteAccelerators.site_id == site.id)
            )
        }
        bandwidth = await session.get(LinkCapacity, link.id)
    assert caps is not None and bandwidth is not None
    assert caps.cpu_m_cap == cores_to_millicores(site.capacity.cpu_cores)
    assert caps.mem_mib_cap == gib_to_mib(site.capacity.memory_gib)
    assert pools == {m: n * 1000 for m, n in site.capacity.accelerators.items() if n > 0}
    assert bandwidth.mbps_cap == gbps_to_mbps(link.bandwidth_gbps)


async def test_seeding_twice_is_refused(sessions: Sessions, seeded: MapArrays) -> None:
    async with sessions.begin() as session:
        with pytest.raises(RegistryError, match="holds a map already"):
            await registry.seed_map(session, document=seeded.map.document)


async def test_register_a_site_with_its_links(sessions: Sessions, seeded: MapArrays) -> None:
    document = seeded.map.document
    site, links = _clone(document, document.sites[0], "BJ-dc-new")
    async with sessions.begin() as session:
        await registry.register_site(session, site=site, links=links)
    after = await _document(sessions)
    assert after.sites[-1] == site
    assert after.links[-len(links) :] == tuple(links)
    async with sessions() as session:
        assert await registry.map_version(session) == 2
        caps = await session.get(SiteCapacity, site.id)
    assert caps is not None and caps.cpu_m_cap == cores_to_millicores(site.capacity.cpu_cores)


async def test_register_refuses_duplicates_and_broken_maps(
    sessions: Sessions, seeded: MapArrays
) -> None:
    document = seeded.map.document
    existing = document.sites[0]
    async with sessions() as session:
        with pytest.raises(RegistryError, match=f"site '{existing.id}' is registered already"):
            await registry.register_site(session, site=existing)
    lonely, _ = _clone(document, existing, "BJ-lonely")
    async with sessions() as session:
        with pytest.raises(RegistryError, match="'BJ-lonely' cannot reach gateway"):
            await registry.register_site(session, site=lonely)
    elsewhere = lonely.model_copy(update={"province": "XX"})
    async with sessions() as session:
        with pytest.raises(RegistryError, match="site 'BJ-lonely': province 'XX' is unknown"):
            await registry.register_site(session, site=elsewhere)
    async with sessions() as session:
        with pytest.raises(RegistryError, match=f"link '{document.links[0].id}' is registered"):
            await registry.register_link(session, link=document.links[0])
    assert await _document(sessions) == document


async def test_update_site_changes_caps_and_keeps_use(
    sessions: Sessions, seeded: MapArrays
) -> None:
    site = seeded.map.sites[0]
    async with sessions.begin() as session:
        await registry.report_site_usage(
            session,
            site_id=site.id,
            cpu_m=5000,
            mem_mib=1024,
            storage_gib=7,
            accelerators={"T4": 3000},
        )
    capacity = site.capacity.model_copy(
        update={"cpu_cores": 100.0, "accelerators": {"A100": 40, "H100": 8}}
    )
    bigger = site.model_copy(
        update={
            "capacity": capacity,
            "node_pools": (),
            "prices": site.prices.model_copy(
                update={"accelerator_hour": {"A100": 9.0, "H100": 20.0}}
            ),
        }
    )
    async with sessions.begin() as session:
        await registry.update_site(session, site=bigger)
    async with sessions() as session:
        caps = await session.get(SiteCapacity, site.id)
        pools = {
            row.model: (row.cap, row.external)
            for row in await session.scalars(
                select(SiteAccelerators).where(SiteAccelerators.site_id == site.id)
            )
        }
        loaded = await registry.load_document(session)
    assert caps is not None
    assert (caps.cpu_m_cap, caps.cpu_m_external, caps.storage_gib_external) == (100_000, 5000, 7)
    assert pools == {"A100": (40_000, 0), "T4": (0, 3000), "H100": (8000, 0)}
    assert loaded.sites[0] == bigger
    assert loaded.sites[1:] == seeded.map.document.sites[1:]


async def test_update_and_retire_unknown_items_name_them(
    sessions: Sessions, seeded: MapArrays
) -> None:
    ghost = seeded.map.sites[0].model_copy(update={"id": "ghost"})
    ghost_link = seeded.map.links[0].model_copy(update={"a": "ghost"})
    async with sessions() as session:
        with pytest.raises(UnknownItem, match="site 'ghost' is not registered"):
            await registry.update_site(session, site=ghost)
        with pytest.raises(UnknownItem, match="site 'ghost' is not registered"):
            await registry.retire_site(session, site_id="ghost")
        with pytest.raises(UnknownItem, match=f"link '{ghost_link.id}' is not registered"):
            await registry.update_link(session, link=ghost_link)
        with pytest.raises(UnknownItem, match="link 'a--b' is not registered"):
            await registry.retire_link(session, link_id="a--b")
        with pytest.raises(UnknownItem, match="site 'ghost'"):
            await registry.report_site_usage(
                session, site_id="ghost", cpu_m=0, mem_mib=0, storage_gib=0, accelerators={}
            )


async def test_retire_site_refuses_while_it_holds_reservations(
    sessions: Sessions, seeded: MapArrays
) -> None:
    site = seeded.map.sites[1]
    held = await hold(sessions, seeded, 1)
    async with sessions() as session:
        with pytest.raises(RegistryError, match=f"site '{site.id}' holds 1 reservation"):
            await registry.retire_site(session, site_id=site.id)
    link = attachments(seeded.map.document, site.id)[0]
    async with sessions() as session:
        with pytest.raises(RegistryError, match=f"link '{link.id}' holds 1 reservation"):
            await registry.retire_link(session, link_id=link.id)
    async with sessions.begin() as session:
        await ledger_store.release(session, reservation_id=held)
    async with sessions.begin() as session:
        await registry.retire_site(session, site_id=site.id)
    after = await _document(sessions)
    assert site.id not in {s.id for s in after.sites}
    assert not attachments(after, site.id)
    ComputeNetworkMap.from_document(after)
    async with sessions.begin() as session:
        await ledger_store.check_invariants(session)
        await registry.register_site(
            session, site=site, links=attachments(seeded.map.document, site.id)
        )
    again = await _document(sessions)
    assert again.sites[-1] == site
    assert len(again.sites) == len(seeded.map.sites)


async def test_links_register_update_and_retire_while_the_map_stays_valid(
    sessions: Sessions, seeded: MapArrays
) -> None:
    site = seeded.map.sites[0]
    first, second = attachments(seeded.map.document, site.id)
    async with sessions.begin() as session:
        await registry.retire_link(session, link_id=first.id)
    async with sessions() as session:
        with pytest.raises(RegistryError, match=f"'{site.id}' cannot reach gateway"):
            await registry.retire_link(session, link_id=second.id)
    faster = second.model_copy(update={"bandwidth_gbps": 1.5})
    async with sessions.begin() as session:
        await registry.update_link(session, link=faster)
        await registry.register_link(session, link=first)
        caps = await session.get(LinkCapacity, second.id)
        assert caps is not None and caps.mbps_cap == 1500
        assert await registry.map_version(session) == 4
    after = await _document(sessions)
    assert after.links[-1] == first
    assert faster in after.links


async def test_usage_reports_reach_the_snapshot(sessions: Sessions, seeded: MapArrays) -> None:
    site, link = seeded.map.sites[0], seeded.map.links[0]
    async with sessions() as session:
        before = await ledger_store.load_snapshot(session, arrays=seeded)
    async with sessions.begin() as session:
        await registry.report_site_usage(
            session,
            site_id=site.id,
            cpu_m=2000,
            mem_mib=4096,
            storage_gib=10,
            accelerators={"A100": 30_000},
        )
        await registry.report_link_usage(session, link_id=link.id, mbps=700)
    async with sessions() as session:
        after = await ledger_store.load_snapshot(session, arrays=seeded)
        with pytest.raises(RegistryError, match="has no 'H100' accelerators"):
            await registry.report_site_usage(
                session,
                site_id=site.id,
                cpu_m=0,
                mem_mib=0,
                storage_gib=0,
                accelerators={"H100": 1000},
            )
        with pytest.raises(RegistryError, match="negative"):
            await registry.report_link_usage(session, link_id=link.id, mbps=-1)
    a100 = seeded.accelerator_column["A100"]
    assert after.free_cpu_m[0] == before.free_cpu_m[0] - 2000
    assert after.free_mem_mib[0] == before.free_mem_mib[0] - 4096
    assert after.free_acc[0, a100] == before.free_acc[0, a100] - 30_000
    assert after.residual_mbps[0] == before.residual_mbps[0] - 700
    assert (after.free_cpu_m[1:] == before.free_cpu_m[1:]).all()
