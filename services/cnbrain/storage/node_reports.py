"""What sites' schedulers report free on the sites' node pools: the last report of each site,
which counts until it expires. The snapshot bounds what the brain's own reservations leave
free on a pool by the pool's report (`ledger_store.load_snapshot`, `PoolSummary.within`).

Nothing here commits: the caller owns the transaction."""

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.ledger.nodes import Pool, PoolSummary
from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.models import NodeReportRecord


def _entry(pool: Pool, summary: PoolSummary) -> dict[str, Any]:
    return {
        "name": pool.name,
        "count": pool.count,
        "units": pool.units,
        "nodes_by_free": list(summary.nodes_by_free),
    }


async def put(
    session: AsyncSession,
    *,
    site_id: str,
    pools: Sequence[Pool],
    summaries: Sequence[PoolSummary],
    expires_at: datetime,
) -> bool:
    """Keep `summaries` (one per pool of `pools`, the site's now) as site `site_id`'s report
    (a site of the registry: the caller checked it) until `expires_at`, replacing the one
    before. Whether what it says free differs from the report before (or there was none)."""
    document = {"pools": [_entry(p, s) for p, s in zip(pools, summaries, strict=True)]}
    before = await session.scalar(
        select(NodeReportRecord.pools).where(NodeReportRecord.site_id == site_id)
    )
    row = {"pools": document, "reported_at": utcnow(), "expires_at": expires_at}
    statement = insert_on_conflict(session, NodeReportRecord).values(site_id=site_id, **row)
    await session.execute(
        statement.on_conflict_do_update(index_elements=[NodeReportRecord.site_id], set_=row)
    )
    return before != document


async def current(
    session: AsyncSession, *, pools: Mapping[str, tuple[Pool, ...]]
) -> dict[str, tuple[PoolSummary | None, ...]]:
    """Per site of `pools` (site id to its pools now) with a report that has not expired, the
    reported summary of each of its pools: None for a pool the report does not describe as
    the map does now (another name, count or units per node: the map changed since)."""
    if not pools:
        return {}
    rows = await session.execute(
        select(NodeReportRecord.site_id, NodeReportRecord.pools).where(
            NodeReportRecord.expires_at > utcnow()
        )
    )
    out: dict[str, tuple[PoolSummary | None, ...]] = {}
    for site_id, document in rows:
        site_pools = pools.get(site_id)
        if site_pools is None:
            continue
        entries = document.get("pools") if isinstance(document, dict) else None
        if not isinstance(entries, list) or len(entries) != len(site_pools):
            continue
        out[site_id] = tuple(
            _summary(pool, entry) for pool, entry in zip(site_pools, entries, strict=True)
        )
    return out


def _summary(pool: Pool, entry: Any) -> PoolSummary | None:
    """What `entry` (of a stored report) says free on `pool`; None when it describes another
    pool or is malformed."""
    if not isinstance(entry, dict):
        return None
    described = (entry.get("name"), entry.get("count"), entry.get("units"))
    nodes = entry.get("nodes_by_free")
    if (
        described != (pool.name, pool.count, pool.units)
        or not isinstance(nodes, list)
        or len(nodes) != pool.units + 1
        or not all(isinstance(n, int) and n >= 0 for n in nodes)
        or sum(nodes) != pool.count
    ):
        return None
    return PoolSummary(tuple(nodes))
