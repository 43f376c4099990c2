"""What sites' schedulers report free on the sites' node pools: the last report of each site,
which counts until it expires. The snapshot bounds what the brain's own reservations leave
free on a pool by the pool's report less the takes of the reservations whose jobs it does
not show running yet (`ledger_store.load_snapshot`, `PoolSummary.less` and `within`).

Nothing here commits: the caller owns the transaction."""

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, exists, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import ReservationState
from cnbrain.ledger.nodes import Pool, PoolSummary
from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.models import JobRecord, NodeReportRecord, NodeTakeRecord, ReservationRecord


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


async def unshown(
    session: AsyncSession, *, pools: Mapping[str, tuple[Pool, ...]]
) -> dict[str, tuple[list[int], ...]]:
    """Per site of `pools` with a report that has not expired, for each of its pools the
    units (whole accelerators; whole cores in a CPU pool) of each node take the report does
    not show yet: the takes of this brain's held reservations whose job had no attempt
    running on the site when the report was read (not yet submitted, waiting in the
    scheduler's queue, between attempts, or ended while the reservation still holds). A
    shared accelerator counts one unit when every take on it is such a take; one that a
    running job shares is already not free in the report. The takes of cross-brain parts
    count as shown: the brain that submitted their jobs follows them. One statement."""
    if not pools:
        return {}
    t, r, j, n = NodeTakeRecord, ReservationRecord, JobRecord, NodeReportRecord
    running = exists().where(
        j.request_id == r.request_id,
        j.site_id == t.site_id,
        j.started_at <= n.reported_at,
        or_(j.ended_at.is_(None), j.ended_at > n.reported_at),
    )
    not_shown = case((and_(r.state == ReservationState.HELD, ~running), 1), else_=0)
    rows = await session.execute(
        select(t.site_id, t.pool, t.node, t.shared, t.devices, t.cpu_m, not_shown)
        .join(n, and_(n.site_id == t.site_id, n.expires_at > utcnow()))
        .outerjoin(r, r.id == t.holder_id)
        .where(t.site_id.in_(sorted(pools)))
    )
    units: dict[str, tuple[list[int], ...]] = {}
    shared: dict[tuple[str, int, int, int], bool] = {}
    for site_id, pool_index, node, device, devices, cpu_m, flag in rows:
        site_pools = pools[site_id]
        if not 0 <= pool_index < len(site_pools):
            continue
        if device >= 0:
            key = (site_id, pool_index, node, device)
            shared[key] = shared.get(key, True) and bool(flag)
        elif flag:
            pool = site_pools[pool_index]
            take = devices if pool.model is not None else math.ceil(cpu_m / 1000)
            _units_of(units, site_pools, site_id)[pool_index].append(take)
    for (site_id, pool_index, _, _), alone in shared.items():
        if alone:
            _units_of(units, pools[site_id], site_id)[pool_index].append(1)
    return units


def _units_of(
    units: dict[str, tuple[list[int], ...]], site_pools: tuple[Pool, ...], site_id: str
) -> tuple[list[int], ...]:
    found = units.get(site_id)
    if found is None:
        found = units[site_id] = tuple([] for _ in site_pools)
    return found
