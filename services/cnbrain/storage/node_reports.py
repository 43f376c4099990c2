"""What sites' schedulers report free on the sites' node pools: the last report of each site,
which counts until it expires. The snapshot bounds what the brain's own reservations leave
free on a pool by the pool's report less the takes of the reservations whose jobs it does
not show running yet (`ledger_store.load_snapshot`, `PoolSummary.less` and `within`).

Nothing here commits: the caller owns the transaction."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, exists, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.accelerators import MILLI
from cnbrain.domain.states import ReservationState
from cnbrain.ledger.nodes import Pool, PoolReport, PoolSummary, describes
from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.models import JobRecord, NodeReportRecord, NodeTakeRecord, ReservationRecord

MAX_SHARED_ENTRIES = 1000
"""Entries of a stored report's `shared_by_free` read, at most (one per free amount)."""


def _entry(pool: Pool, report: PoolReport) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": pool.name,
        "count": pool.count,
        "units": pool.units,
        "nodes_by_free": list(report.summary.nodes_by_free),
    }
    if report.shards:
        entry["shared_by_free"] = [list(pair) for pair in report.summary.shared_by_free]
    return entry


async def put(
    session: AsyncSession,
    *,
    site_id: str,
    pools: Sequence[Pool],
    reports: Sequence[PoolReport],
    expires_at: datetime,
) -> bool:
    """Keep `reports` (one per pool of `pools`, the site's now) as site `site_id`'s report
    (a site of the registry: the caller checked it) until `expires_at`, replacing the one
    before. Whether what it says free differs from the report before (or there was none)."""
    document = {"pools": [_entry(p, r) for p, r in zip(pools, reports, strict=True)]}
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
) -> dict[str, tuple[PoolReport | None, ...]]:
    """Per site of `pools` (site id to its pools now) with a report that has not expired, the
    report of each of its pools: None for a pool the report does not describe as the map
    does now (another name, count or units per node: the map changed since), or describes
    malformed."""
    if not pools:
        return {}
    rows = await session.execute(
        select(NodeReportRecord.site_id, NodeReportRecord.pools).where(
            NodeReportRecord.expires_at > utcnow()
        )
    )
    out: dict[str, tuple[PoolReport | None, ...]] = {}
    for site_id, document in rows:
        site_pools = pools.get(site_id)
        if site_pools is None:
            continue
        entries = document.get("pools") if isinstance(document, dict) else None
        if not isinstance(entries, list) or len(entries) != len(site_pools):
            continue
        out[site_id] = tuple(
            _report(pool, entry) for pool, entry in zip(site_pools, entries, strict=True)
        )
    return out


def _report(pool: Pool, entry: Any) -> PoolReport | None:
    """What `entry` (of a stored report) says free on `pool`; None when it describes another
    pool or is malformed."""
    if not isinstance(entry, dict):
        return None
    described = (entry.get("name"), entry.get("count"), entry.get("units"))
    nodes = entry.get("nodes_by_free")
    if (
        described != (pool.name, pool.count, pool.units)
        or not isinstance(nodes, list)
        or not all(_whole(n) for n in nodes)
    ):
        return None
    shards = "shared_by_free" in entry
    shared = _pairs(entry["shared_by_free"]) if shards else []
    if shared is None or not describes(pool, nodes, shared):
        return None
    return PoolReport(PoolSummary(tuple(nodes), tuple(shared)), shards=shards)


def _pairs(value: Any) -> list[tuple[int, int]] | None:
    """A stored `shared_by_free`: `[free, count]` pairs of integers, each free once, by free
    ascending, at most `MAX_SHARED_ENTRIES`; None otherwise."""
    if not isinstance(value, list) or len(value) > MAX_SHARED_ENTRIES:
        return None
    pairs = [
        (free, count)
        for free, count in (pair for pair in value if isinstance(pair, list) and len(pair) == 2)
        if _whole(free) and _whole(count)
    ]
    frees = [free for free, _ in pairs]
    return pairs if len(pairs) == len(value) and frees == sorted(set(frees)) else None


def _whole(value: Any) -> bool:
    """Whether `value` is an integer (a JSON number without a fraction), not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(slots=True)
class Unshown:
    """What a report does not show yet on one pool (`unshown`): `takes`, the units of each
    node take; `opened`, the free milli-accelerators of each shared accelerator that such
    takes alone share (each also one unit of `takes`)."""

    takes: list[int] = field(default_factory=list)
    opened: list[int] = field(default_factory=list)


async def unshown(
    session: AsyncSession, *, pools: Mapping[str, tuple[Pool, ...]]
) -> dict[str, tuple[Unshown, ...]]:
    """Per site of `pools` with a report that has not expired, what the report does not show
    yet on each of its pools: the node takes of this brain's held reservations whose job had
    no attempt running on the site when the report was read (not yet submitted, waiting in
    the scheduler's queue, between attempts, or ended while the reservation still holds).
    Each whole take counts its units (whole accelerators; whole cores in a CPU pool). A
    shared accelerator that only such takes share counts one unit, and is opened with what
    they leave free of it; one that a running job shares is already not free in the report.
    The takes of cross-brain parts count as shown: the brain that submitted their jobs
    follows them. One statement."""
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
        select(t.site_id, t.pool, t.node, t.shared, t.devices, t.milli, t.cpu_m, not_shown)
        .join(n, and_(n.site_id == t.site_id, n.expires_at > utcnow()))
        .outerjoin(r, r.id == t.holder_id)
        .where(t.site_id.in_(sorted(pools)))
    )
    found: dict[str, tuple[Unshown, ...]] = {}
    shared: dict[tuple[str, int, int, int], tuple[bool, int]] = {}
    for site_id, pool_index, node, device, devices, milli, cpu_m, flag in rows:
        site_pools = pools[site_id]
        if not 0 <= pool_index < len(site_pools):
            continue
        if device >= 0:
            key = (site_id, pool_index, node, device)
            alone, taken = shared.get(key, (True, 0))
            shared[key] = (alone and bool(flag), taken + milli)
        elif flag:
            units = site_pools[pool_index].units_of(devices, cpu_m)
            _of(found, site_pools, site_id)[pool_index].takes.append(units)
    for (site_id, pool_index, _, _), (alone, taken) in shared.items():
        if alone:
            pool_unshown = _of(found, pools[site_id], site_id)[pool_index]
            pool_unshown.takes.append(1)
            pool_unshown.opened.append(MILLI - taken)
    return found


def _of(
    found: dict[str, tuple[Unshown, ...]], site_pools: tuple[Pool, ...], site_id: str
) -> tuple[Unshown, ...]:
    of_site = found.get(site_id)
    if of_site is None:
        of_site = found[site_id] = tuple(Unshown() for _ in site_pools)
    return of_site
