"""What a site's scheduler reports free on its node pools, less the takes of the brain's
reservations whose jobs it does not show running yet, bounds what the snapshot shows free
there, until the report expires; a report of pools the map no longer has counts for nothing."""

import dataclasses
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select, update

from cnbrain.domain.states import AttemptState
from cnbrain.ledger.nodes import Pool, PoolReport, PoolSummary
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import jobs, ledger_store, node_reports, peer_ledger
from cnbrain.storage.clock import utcnow
from cnbrain.storage.models import JobRecord, NodeReportRecord
from tests.databases import Sessions
from tests.storage.test_node_takes import SITE, a100_nodes, fraction, gang, ledger

pytestmark = pytest.mark.asyncio

__all__ = ["ledger"]


def pools_of(arrays: MapArrays) -> tuple[Pool, ...]:
    return tuple(Pool.of(pool) for pool in arrays.map.site(SITE).node_pools)


async def report(
    sessions: Sessions,
    pools: tuple[Pool, ...],
    a100_free: list[int],
    *,
    hours: float = 1,
    shared: list[int] | None = None,
) -> bool:
    """Keep a report of SITE whose first pool's nodes have `a100_free` free, the rest whole;
    with `shared`, the first pool's shared A100 with those milli free (the site's shards)."""
    first = PoolSummary.of_free_units(pools[0], a100_free, shared or ())
    reports = [PoolReport(first, shards=shared is not None)] + [
        PoolReport(PoolSummary.empty(pool)) for pool in pools[1:]
    ]
    async with sessions.begin() as session:
        return await node_reports.put(
            session,
            site_id=SITE,
            pools=pools,
            reports=reports,
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
    # Its job is not running, so the report does not show the brain's take: with the drained
    # node, two nodes keep 8 A100 free and one 4.
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (1, 0, 0, 0, 1, 0, 0, 0, 2)
    assert not await report(sessions, pools, [8, 8, 0, 8])  # the same again: no change
    assert await report(sessions, pools, [8, 8, 8, 8])  # back in service
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (0,) * 4 + (1,) + (0,) * 3 + (3,)


async def started(
    sessions: Sessions, n: int, at: datetime, *, ended: datetime | None = None
) -> None:
    """Request n's first attempt on SITE started at `at` (and ended at `ended`)."""
    async with sessions.begin() as session:
        await jobs.queue_attempt(
            session,
            request_id=f"req-{n}",
            tenant_id="acme",
            attempt=1,
            site_id=SITE,
            backend="slurm",
        )
        state = AttemptState.RUNNING if ended is None else AttemptState.COMPLETED
        await session.execute(
            update(JobRecord)
            .where(JobRecord.request_id == f"req-{n}")
            .values(state=state, started_at=at, ended_at=ended)
        )


async def reported_at(sessions: Sessions) -> datetime:
    """When SITE's report was read."""
    async with sessions() as session:
        found = await session.scalar(
            select(NodeReportRecord.reported_at).where(NodeReportRecord.site_id == SITE)
        )
    assert found is not None
    return found


async def test_a_report_counts_the_takes_of_jobs_it_shows_running_once(
    sessions: Sessions, ledger: MapArrays
) -> None:
    pools = pools_of(ledger)
    for n in range(4):
        async with sessions.begin() as session:
            await ledger_store.reserve_many(session, claims=[gang(n, 1, 4)])
    # The brain's takes: two nodes with 4 A100 taken twice (0 free), two whole.
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (2,) + (0,) * 7 + (2,)
    # The scheduler shows request 0 and 1 running on one node; node 3 is drained.
    await report(sessions, pools, [0, 8, 8, 0])
    read = await reported_at(sessions)
    await started(sessions, 0, read - timedelta(minutes=5))
    await started(sessions, 1, read - timedelta(minutes=5))
    # Request 2 started after the report was read, request 3 ended before it while its
    # reservation still holds: neither is in the report, so each takes 4 of a node.
    await started(sessions, 2, read + timedelta(seconds=1))
    await started(sessions, 3, read - timedelta(minutes=9), ended=read - timedelta(minutes=1))
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (3,) + (0,) * 7 + (1,)
    # With request 2 and 3 shown too (a report read later), the two 8s stay: each of the
    # four takes counts once.
    await report(sessions, pools, [0, 0, 8, 8])
    async with sessions.begin() as session:
        await session.execute(
            update(JobRecord)
            .where(JobRecord.request_id.in_(["req-2", "req-3"]))
            .values(started_at=read, ended_at=None)
        )
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (2,) + (0,) * 7 + (2,)


async def share_one_a100(sessions: Sessions) -> None:
    """Requests 0 and 1 hold 500 and 250 thousandths of one A100 of SITE."""
    for n, milli in enumerate((500, 250)):
        async with sessions.begin() as session:
            await ledger_store.reserve_many(session, claims=[fraction(n, milli)])


async def test_a_shared_accelerator_counts_once_unless_a_running_job_shares_it(
    sessions: Sessions, ledger: MapArrays
) -> None:
    pools = pools_of(ledger)
    await share_one_a100(sessions)
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (0,) * 7 + (1, 3)
    # Node 3 is drained and the scheduler shows no A100 in use: the two fractions, not
    # running, share one A100 of another node, which it does not show yet.
    await report(sessions, pools, [8, 8, 8, 0])
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (1,) + (0,) * 6 + (1, 2)
    # The scheduler shows the 500 running on an A100: the 250 shares it, so it takes no
    # other A100 of the report.
    await report(sessions, pools, [7, 8, 8, 0])
    await started(sessions, 0, await reported_at(sessions) - timedelta(minutes=1))
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (1,) + (0,) * 6 + (1, 2)


async def test_the_takes_of_cross_brain_parts_count_as_shown(
    sessions: Sessions, ledger: MapArrays
) -> None:
    part = dataclasses.replace(gang(5, 1, 8), counts_quota=False)
    async with sessions.begin() as session:
        await peer_ledger.prepare(session, claim=part, expires_at=utcnow() + timedelta(hours=1))
    # The brain that submitted the part's job follows it; the report is taken as showing it.
    await report(sessions, pools_of(ledger), [0, 8, 8, 8])
    assert (await a100_nodes(sessions, ledger)).nodes_by_free == (1,) + (0,) * 7 + (3,)


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
    assert reported[SITE][1:] == tuple(PoolReport(PoolSummary.empty(pool)) for pool in pools[1:])


async def test_a_report_of_shards_bounds_the_shared_accelerators_too(
    sessions: Sessions, ledger: MapArrays
) -> None:
    pools = pools_of(ledger)
    await share_one_a100(sessions)
    await started(sessions, 0, utcnow() - timedelta(minutes=5))
    await started(sessions, 1, utcnow() - timedelta(minutes=5))
    assert (await a100_nodes(sessions, ledger)).shared_by_free == ((250, 1),)
    # A site without shards tells nothing of its shared accelerators.
    await report(sessions, pools, [7, 8, 8, 8])
    assert (await a100_nodes(sessions, ledger)).shared_by_free == ((250, 1),)
    # One with shards: a job from outside the brain holds 150 more of that A100.
    await report(sessions, pools, [7, 8, 8, 8], shared=[100])
    assert (await a100_nodes(sessions, ledger)).shared_by_free == ((100, 1),)
    # Shards of a second A100 in use from outside: for every amount, the fewer of the two
    # views, one A100 with 250 or more free.
    await report(sessions, pools, [6, 8, 8, 8], shared=[100, 600])
    nodes = await a100_nodes(sessions, ledger)
    assert nodes.shared_by_free == ((250, 1),) and nodes.nodes_by_free == (0,) * 6 + (1, 0, 3)
    async with sessions() as session:
        [stored, *_] = (await node_reports.current(session, pools={SITE: pools}))[SITE]
    assert stored == PoolReport(PoolSummary((0,) * 6 + (1, 0, 3), ((100, 1), (600, 1))), True)


async def test_fractions_not_yet_running_open_a_shared_accelerator_in_the_report(
    sessions: Sessions, ledger: MapArrays
) -> None:
    pools = pools_of(ledger)
    await share_one_a100(sessions)
    # The scheduler shows nothing shared yet: the brain's two fractions, not running, open
    # an A100 with 250 free, which stays shared in what the snapshot shows.
    await report(sessions, pools, [8, 8, 8, 8], shared=[])
    nodes = await a100_nodes(sessions, ledger)
    assert nodes.shared_by_free == ((250, 1),) and nodes.nodes_by_free == (0,) * 7 + (1, 3)


@pytest.mark.parametrize(
    "shared",
    [
        [[0, 1]],  # no fraction free
        [[1000, 1]],  # a whole one
        [[500, 0]],  # of no accelerator
        [[500, True]],
        [[500.5, 1]],
        [[600, 1], [500, 1]],  # not by free ascending
        [[500, 1], [500, 1]],
        [[500, 1, 1]],
        [[500, 33]],  # more than the pool's 32 accelerators
        [[f, 1] for f in range(1, 1002)],
        "500",
    ],
)
async def test_a_stored_report_with_malformed_shared_accelerators_counts_for_nothing(
    sessions: Sessions, ledger: MapArrays, shared: object
) -> None:
    pools = pools_of(ledger)
    await report(sessions, pools, [8, 8, 8, 8], shared=[500])
    async with sessions.begin() as session:
        document = await session.scalar(
            select(NodeReportRecord.pools).where(NodeReportRecord.site_id == SITE)
        )
        assert document is not None
        document["pools"][0]["shared_by_free"] = shared
        await session.execute(
            update(NodeReportRecord)
            .where(NodeReportRecord.site_id == SITE)
            .values(pools=dict(document))
        )
    async with sessions() as session:
        reported = await node_reports.current(session, pools={SITE: pools})
    assert reported[SITE][0] is None
    assert reported[SITE][1] == PoolReport(PoolSummary.empty(pools[1]))
