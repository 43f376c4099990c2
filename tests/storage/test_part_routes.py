"""A held part moved onto new links (`storage.part_routes`), on PostgreSQL and SQLite: its
bandwidth taken on the new links under the part, then given back on the old ones, its
compute untouched, the ledger exact at every step; a part released or moved meanwhile, or a
link without room, refuses the move and changes nothing."""

from datetime import timedelta

import pytest
import pytest_asyncio

from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import ledger_store, part_routes, peer_ledger, registry
from cnbrain.storage.clock import utcnow
from cnbrain.storage.errors import CapacityConflict
from cnbrain.storage.part_routes import HeldPart, PartChanged
from cnbrain.storage.tenants import create_tenant
from tests.databases import Sessions
from tests.ledger.claims import claim

pytestmark = pytest.mark.asyncio

MBPS = 200


@pytest_asyncio.fixture
async def ledger(sessions: Sessions, seeded: MapArrays) -> MapArrays:
    async with sessions.begin() as session:
        await create_tenant(session, tenant_id="acme", name="Acme")
    return seeded


def _links(arrays: MapArrays) -> tuple[str, str, str]:
    """Three links of the first site's province: its own first link, and two others."""
    site = arrays.map.sites[0]
    own = sorted(link.id for link in arrays.map.links if site.id in (link.a, link.b))
    others = sorted(
        link.id
        for link in arrays.map.links
        if link.id not in own and arrays.map.node_province.get(link.a) == site.province
    )
    return own[0], others[0], others[1]


async def _held(sessions: Sessions, arrays: MapArrays, link: str) -> HeldPart:
    """A committed part on the first site, with `MBPS` on `link`."""
    site = arrays.map.sites[0]
    held = claim(
        "rsv-1",
        "req-1",
        "acme",
        site_id=site.id,
        cpu_m=4000,
        mem_mib=8192,
        storage_gib=10,
        link_ids=(link,),
        mbps=MBPS,
        counts_quota=False,
    )
    async with sessions.begin() as session:
        await peer_ledger.prepare(session, claim=held, expires_at=utcnow() + timedelta(minutes=5))
        assert (
            await peer_ledger.commit(
                session, reservation_id="rsv-1", decision={"request_id": "req-1"}, request=None
            )
            is None
        )
    async with sessions() as session:
        part = await part_routes.held_part(session, reservation_id="rsv-1")
    assert part is not None
    return part


async def _free(sessions: Sessions, arrays: MapArrays) -> Snapshot:
    async with sessions() as session:
        await ledger_store.check_invariants(session)
        return await ledger_store.load_snapshot(session, arrays=arrays)


def _mbps(snapshot: Snapshot, arrays: MapArrays, link: str) -> int:
    return int(snapshot.residual_mbps[arrays.link_index[link]])


async def test_a_part_moves_onto_new_links_and_gives_the_old_back(
    sessions: Sessions, ledger: MapArrays
) -> None:
    old, new, _ = _links(ledger)
    empty = await _free(sessions, ledger)
    part = await _held(sessions, ledger, old)
    assert (part.link_ids, part.mbps, part.has_flows) == ((old,), MBPS, False)

    async with sessions.begin() as session:
        await part_routes.take_links(session, part=part, added=[new])
    both = await _free(sessions, ledger)
    assert _mbps(both, ledger, old) == _mbps(empty, ledger, old) - MBPS
    assert _mbps(both, ledger, new) == _mbps(empty, ledger, new) - MBPS

    async with sessions.begin() as session:
        await part_routes.drop_links(
            session, part=part, link_ids=[old, new], dropped=[old], decision={"moved": True}
        )
    moved = await _free(sessions, ledger)
    assert _mbps(moved, ledger, old) == _mbps(empty, ledger, old)
    assert _mbps(moved, ledger, new) == _mbps(empty, ledger, new) - MBPS
    assert (moved.free_cpu_m == both.free_cpu_m).all(), "its compute stays"
    async with sessions() as session:
        after = await part_routes.held_part(session, reservation_id="rsv-1")
    assert after is not None
    assert (after.link_ids, after.decision) == ((new,), {"moved": True})

    async with sessions.begin() as session:
        assert await peer_ledger.release(session, reservation_id="rsv-1") is True
    released = await _free(sessions, ledger)
    assert (released.residual_mbps == empty.residual_mbps).all()
    assert (released.free_cpu_m == empty.free_cpu_m).all()


async def test_a_part_released_or_moved_meanwhile_is_not_moved(
    sessions: Sessions, ledger: MapArrays
) -> None:
    old, new, other = _links(ledger)
    part = await _held(sessions, ledger, old)
    async with sessions.begin() as session:
        await part_routes.take_links(session, part=part, added=[new])
    taken = await _free(sessions, ledger)

    # Read before the move: its links are not those it holds now.
    with pytest.raises(PartChanged):
        async with sessions.begin() as session:
            await part_routes.take_links(session, part=part, added=[other])
    with pytest.raises(PartChanged):
        async with sessions.begin() as session:
            await part_routes.drop_links(
                session, part=part, link_ids=[old], dropped=[old], decision=None
            )
    assert ((await _free(sessions, ledger)).residual_mbps == taken.residual_mbps).all()

    async with sessions.begin() as session:
        await peer_ledger.release(session, reservation_id="rsv-1")
    with pytest.raises(PartChanged, match="not held"):
        async with sessions.begin() as session:
            await part_routes.drop_links(
                session, part=part, link_ids=[old, new], dropped=[old], decision=None
            )
    async with sessions() as session:
        assert await part_routes.held_part(session, reservation_id="rsv-1") is None


async def test_a_new_link_without_room_refuses_the_move(
    sessions: Sessions, ledger: MapArrays
) -> None:
    old, new, _ = _links(ledger)
    part = await _held(sessions, ledger, old)
    before = await _free(sessions, ledger)
    cap = next(link for link in ledger.map.links if link.id == new).bandwidth_gbps * 1000
    async with sessions.begin() as session:
        await registry.report_link_usage(session, link_id=new, mbps=int(cap) - MBPS + 1)

    with pytest.raises(CapacityConflict, match=new):
        async with sessions.begin() as session:
            await part_routes.take_links(session, part=part, added=[new])

    after = await _free(sessions, ledger)
    assert _mbps(after, ledger, old) == _mbps(before, ledger, old)
    async with sessions() as session:
        still = await part_routes.held_part(session, reservation_id="rsv-1")
    assert still is not None and still.link_ids == (old,)
