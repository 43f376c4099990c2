"""What a site's scheduler reports free on its node pools bounds what the snapshot shows free
there, until the report expires; a report of pools the map no longer has counts for nothing."""

from datetime import timedelta

import pytest

from cnbrain.ledger.nodes import Pool, PoolSummary
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import ledger_store, node_reports
from cnbrain.storage.clock import utcnow
from tests.databases import Sessions
from tests.storage.test_node_takes import SITE, a100_nodes, gang, ledger

pytestmark = pytest.mark.asyncio

__all__ = ["ledger"]


def pools_of(arrays: MapArrays) -> tuple[Pool, ...]:
    return tuple(Pool.of(pool) for pool in arrays.map.site(SITE).node_pools)


async def report(
    sessions: Sessions, pools: tuple[Pool, ...], a100_free: list[int], *, hours: float = 1
) -> bool:
    """Keep a report of SITE whose first pool's nodes have `a100_free` free, the rest whole."""
    summaries = [PoolSummary.of_free_units(pools[0], a100_free)] + [
        PoolSummary.empty(pool) for pool in pools[1:]
    ]
    async with sessions.begin() as session:
        return await node_reports.put(
            session,
            site_id=SITE,
            pools=pools,
            summaries=summaries,
            expires_at=utcnow() + timedelta(hours=hours),
        )


async def test_a_report_bounds_what_the_snapshot_shows_free(
    sessions: Sessions, ledger: MapArrays
) -> None:
    pools = pools_of(ledger)
    assert await report(sessions, pools, [8, 8, 0, 8])  # one node drained
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (1,) + (0,) * 7 + (3,)
    async with sessions.begin() as session:
        await ledger_store.reserve_many(session, claims=[gang(0, 1, 4)])
    # The brain's own take and the drained node: at most three nodes with any A100 free.
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (1,) + (0,) * 7 + (3,)
    assert not await report(sessions, pools, [8, 8, 0, 8])  # the same again: no change
    assert await report(sessions, pools, [8, 8, 8, 8])  # back in service
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (0,) * 4 + (1,) + (0,) * 3 + (3,)


async def test_an_expired_report_counts_for_nothing(sessions: Sessions, ledger: MapArrays) -> None:
    await report(sessions, pools_of(ledger), [0, 0, 0, 0], hours=-1)
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (0,) * 8 + (4,)


async def test_a_report_of_pools_the_map_no_longer_has_counts_for_nothing(
    sessions: Sessions, ledger: MapArrays
) -> None:
    pools = pools_of(ledger)
    first = pools[0]
    grown = Pool(first.name, first.count + 1, first.cpu_m, first.mem_mib, first.model, 8)
    await report(sessions, (grown, *pools[1:]), [0, 0, 0, 0, 0])
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (0,) * 8 + (4,)
    async with sessions() as session:
        reported = await node_reports.current(session, pools={SITE: pools})
    assert reported[SITE][0] is None
    assert reported[SITE][1:] == tuple(PoolSummary.empty(pool) for pool in pools[1:])
