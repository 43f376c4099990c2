"""The database ledger on a site with node pools: a claim takes the nodes of its gang, all of
them or none, even when the site's totals would hold it; the snapshot summarises what the
holding takes leave free; a release gives its nodes back, and a prepared cross-brain part
takes nodes as a reservation does."""

import dataclasses
from datetime import timedelta

import pytest
import pytest_asyncio

from cnbrain.ledger.claim import Claim
from cnbrain.ledger.nodes import NodeTake, PoolSummary
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import ledger_store, peer_ledger
from cnbrain.storage.clock import utcnow
from cnbrain.storage.errors import CapacityConflict
from cnbrain.storage.requests import NewRequest, insert_requests
from cnbrain.storage.tenants import create_tenant, create_user
from tests.databases import Sessions
from tests.ledger.windows import HOUR

pytestmark = pytest.mark.asyncio

TENANT = "acme"
SITE = "BJ-dc-1"
"""Its first pool: 4 nodes of 8 A100, 128 cores and 1024 GiB each."""


@pytest_asyncio.fixture
async def ledger(sessions: Sessions, seeded: MapArrays) -> MapArrays:
    async with sessions.begin() as session:
        await create_tenant(session, tenant_id=TENANT, name="Acme")
        await create_user(
            session, user_id="alice", name="Alice", role="tenant-user", tenant_id=TENANT
        )
        await insert_requests(
            session,
            [
                NewRequest(request_id=f"req-{i}", tenant_id=TENANT, user_id="alice", body={})
                for i in range(8)
            ],
        )
    return seeded


def gang(n: int, nodes: int, a100: int) -> Claim:
    """`nodes` nodes of `a100` A100, 8 cores and 16 GiB each, on SITE for request n."""
    return Claim(
        reservation_id=f"rsv-{n}",
        request_id=f"req-{n}",
        tenant_id=TENANT,
        site_id=SITE,
        cpu_m=nodes * 8000,
        mem_mib=nodes * 16384,
        storage_gib=0,
        accelerator_model="A100",
        accelerator_milli=nodes * a100 * 1000,
        link_ids=(),
        mbps=0,
        window=HOUR,
        nodes=nodes,
    )


async def a100_nodes(sessions: Sessions, arrays: MapArrays) -> PoolSummary:
    async with sessions() as session:
        snapshot = await ledger_store.load_snapshot(session, arrays=arrays)
    return snapshot.nodes[arrays.map.site_index[SITE]][0]


async def test_gangs_take_nodes_all_or_none_and_give_them_back(
    sessions: Sessions, ledger: MapArrays
) -> None:
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (0,) * 8 + (4,)
    for n in range(3):
        async with sessions.begin() as session:
            await ledger_store.reserve_many(session, claims=[gang(n, 1, 4)])
    # Best fit: node 0 takes two of them (0 free), node 1 one (4 free); 20 A100 stay free.
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (1, 0, 0, 0, 1, 0, 0, 0, 2)
    async with sessions.begin() as session:
        await ledger_store.reserve_many(session, claims=[gang(3, 2, 6)])
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (1, 0, 2, 0, 1, 0, 0, 0, 0)
    with pytest.raises(CapacityConflict, match="nodes"):
        async with sessions.begin() as session:
            await ledger_store.reserve_many(session, claims=[gang(4, 2, 3)])
    async with sessions() as session:
        assert await ledger_store.held_reservations(session, request_id="req-4") == []
    async with sessions.begin() as session:
        await ledger_store.release(session, reservation_id="rsv-3")
    async with sessions.begin() as session:
        await ledger_store.reserve_many(session, claims=[gang(4, 2, 3)])
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (1, 1, 0, 0, 0, 1, 0, 0, 1)
    async with sessions() as session:
        await ledger_store.check_invariants(session)


async def test_a_held_gang_read_back_and_taken_again_takes_as_many_nodes(
    sessions: Sessions, ledger: MapArrays
) -> None:
    """What re-routing a held reservation does in one unit of work: its claim read back,
    released, and taken again under a new id."""
    async with sessions.begin() as session:
        await ledger_store.reserve_many(session, claims=[gang(3, 2, 6)])
    before = await a100_nodes(sessions, ledger)
    async with sessions() as session:
        (held,) = await ledger_store.held_claims(session, request_id="req-3")
    assert held == gang(3, 2, 6)
    async with sessions.begin() as session:
        await ledger_store.release(session, reservation_id=held.reservation_id)
        await ledger_store.reserve_many(
            session, claims=[dataclasses.replace(held, reservation_id="rsv-3b")]
        )
    assert await a100_nodes(sessions, ledger) == before
    async with sessions() as session:
        await ledger_store.check_invariants(session)


async def test_a_prepared_part_takes_nodes_until_it_is_released(
    sessions: Sessions, ledger: MapArrays
) -> None:
    part = dataclasses.replace(gang(5, 3, 8), counts_quota=False)
    async with sessions.begin() as session:
        await peer_ledger.prepare(session, claim=part, expires_at=utcnow() + timedelta(hours=1))
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (3,) + (0,) * 7 + (1,)
    with pytest.raises(CapacityConflict, match="nodes"):
        async with sessions.begin() as session:
            await ledger_store.reserve_many(session, claims=[gang(6, 2, 1)])
    async with sessions.begin() as session:
        assert await peer_ledger.release(session, reservation_id=part.reservation_id)
    async with sessions.begin() as session:
        await ledger_store.reserve_many(session, claims=[gang(6, 2, 1)])
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (0,) * 7 + (2, 2)


async def test_node_takes_read_with_the_end_of_their_holders(
    sessions: Sessions, ledger: MapArrays
) -> None:
    later = dataclasses.replace(HOUR, end=HOUR.end + 600)
    part = dataclasses.replace(gang(5, 1, 8), counts_quota=False, window=later)
    async with sessions.begin() as session:
        await ledger_store.reserve_many(session, claims=[gang(3, 2, 6)])
        await peer_ledger.prepare(session, claim=part, expires_at=utcnow() + timedelta(hours=1))
    async with sessions() as session:
        ending = await ledger_store.node_takes_ending(session, site_ids=[SITE, "AA-dc"])
    assert set(ending) == {SITE}
    found = sorted((end, request, take.devices) for end, request, take in ending[SITE])
    assert found == [(HOUR.end, "req-3", 6), (HOUR.end, "req-3", 6), (later.end, "req-5", 8)]
    async with sessions.begin() as session:
        await ledger_store.release(session, reservation_id="rsv-3")
        assert await peer_ledger.release(session, reservation_id=part.reservation_id)
    async with sessions() as session:
        assert await ledger_store.node_takes_ending(session, site_ids=[SITE]) == {}


async def test_a_gang_takes_the_nodes_its_plan_names_when_they_hold_it(
    sessions: Sessions, ledger: MapArrays
) -> None:
    """Four A100 planned on node 2 (the ledger's own rule would take node 0); a plan with
    the wrong share (the ledger's rule: the best fit, node 2 again); a plan of node 2 once
    it is full (the ledger's rule: node 0); one A100 planned on node 3."""
    planned = NodeTake(pool=0, node=2, devices=4, shared=-1, milli=0, cpu_m=8000, mem_mib=16384)
    plans = [
        (gang(0, 1, 4), planned),
        (gang(1, 1, 4), dataclasses.replace(planned, node=1, devices=5)),
        (gang(2, 1, 4), planned),
        (gang(3, 1, 1), dataclasses.replace(planned, node=3, devices=1)),
    ]
    for claim, plan in plans:
        async with sessions.begin() as session:
            await ledger_store.reserve_many(
                session, claims=[dataclasses.replace(claim, node_takes=(plan,))]
            )
    async with sessions() as session:
        ending = await ledger_store.node_takes_ending(session, site_ids=[SITE])
    nodes = {request: take.node for _, request, take in ending[SITE]}
    assert nodes == {"req-0": 2, "req-1": 2, "req-2": 0, "req-3": 3}
    async with sessions() as session:
        await ledger_store.check_invariants(session)


def fraction(n: int, milli: int) -> Claim:
    """`milli` thousandths of one A100, with 1 core and 2 GiB, on SITE for request n."""
    return dataclasses.replace(gang(n, 1, 0), cpu_m=1000, mem_mib=2048, accelerator_milli=milli)


async def test_fractions_share_one_accelerator_and_count_their_thousandths(
    sessions: Sessions, ledger: MapArrays
) -> None:
    a100 = ledger.accelerator_column["A100"]
    site = ledger.map.site_index[SITE]

    async def free_a100() -> int:
        async with sessions() as session:
            snapshot = await ledger_store.load_snapshot(session, arrays=ledger)
        return int(snapshot.free_acc[site, a100])

    whole = await free_a100()
    for n, milli in enumerate((500, 250, 250)):
        async with sessions.begin() as session:
            await ledger_store.reserve_many(session, claims=[fraction(n, milli)])
    # One A100 of one node holds all three; the totals count 1000 thousandths.
    nodes = await a100_nodes(sessions, ledger)
    assert nodes.nodes_by_free == (0,) * 7 + (1, 3) and nodes.shared_by_free == ()
    assert await free_a100() == whole - 1000
    async with sessions.begin() as session:
        await ledger_store.reserve_many(session, claims=[fraction(3, 300)])
    nodes = await a100_nodes(sessions, ledger)
    assert nodes.nodes_by_free == (0,) * 6 + (1, 0, 3) and nodes.shared_by_free == ((700, 1),)
    async with sessions.begin() as session:
        await ledger_store.release(session, reservation_id="rsv-1")
    nodes = await a100_nodes(sessions, ledger)
    assert nodes.shared_by_free == ((250, 1), (700, 1))
    assert await free_a100() == whole - 1050
    async with sessions() as session:
        await ledger_store.check_invariants(session)


async def test_gangs_keep_the_free_accelerators_the_held_shapes_use(
    sessions: Sessions, ledger: MapArrays
) -> None:
    for n, (nodes, a100) in enumerate([(1, 4), (1, 3), (2, 4)]):
        async with sessions.begin() as session:
            await ledger_store.reserve_many(session, claims=[gang(n, nodes, a100)])
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (0, 1, 0, 0, 2, 0, 0, 0, 1)
    # Three node takes of 4 and one of 3 are held: two nodes of 2 come from a node with 8
    # free (leaving 6) and one with 4, not from both 4s as best fit would, and so two nodes
    # of 4 still fit.
    async with sessions.begin() as session:
        await ledger_store.reserve_many(session, claims=[gang(3, 2, 2)])
    held = await a100_nodes(sessions, ledger)
    assert held.nodes_by_free == (0, 1, 1, 0, 1, 0, 1, 0, 0)
    assert held.held == ((2, 0, 2), (3, 0, 1), (4, 0, 3))
    async with sessions.begin() as session:
        await ledger_store.reserve_many(session, claims=[gang(4, 2, 4)])
    async with sessions() as session:
        await ledger_store.check_invariants(session)
