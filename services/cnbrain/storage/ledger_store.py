"""The ledger in the database: the truth about what is reserved.

Contract:

- `reserve_many` takes claims as held reservations, all or nothing (`take_many` the same
  without storing reservations, for the parts of cross-brain reservations): it adds up their
  amounts per site, accelerator pool, link and tenant, locks the rows of each table in key
  order, checks that each sum fits what the row has free (cap - used - external) or left
  (limit - used), then adds the sums and inserts the reservations. A batch costs a fixed
  number of statements whatever its size (on PostgreSQL: six locking reads and one
  statement for the updates and inserts, all plain SQL with arrays, and, for claims on
  sites, one read of the room holds and a delete when some end and, on sites with node
  pools, one read and one insert of node takes). A single claim is a
  batch of one. Concurrent transactions, in one process or several on one PostgreSQL
  database, never oversubscribe a site, an accelerator pool, a link or a quota.
- Room holds (`room_holds`) are capacity taken from every request but the one each is held
  for: on a site, the sums must also leave what the holds active now (`until` after now)
  keep there for requests without a claim on a site in the batch. The holds of the requests
  with a claim on a site in the batch end in the same transaction (deleted), their room
  taken by those claims. The holds are read after the site rows are locked, so a hold
  stored before the room it keeps was freed is always seen by a batch that sees that room.
- Rows are locked in one global order (site rows by id, link rows by id, site capacity by site,
  accelerators by site and model, link capacity by link, quotas by tenant), each table with
  one `SELECT ... ORDER BY ... FOR UPDATE` (PostgreSQL locks such rows in the order of the
  sort), so concurrent reserve_many/take_many/release/retire never deadlock.
- `release` gives back exactly what `reserve_many` took, once. A reservation holds over its
  claim's window [start_at, end_at); releasing it (the request completed, failed or was
  cancelled, however early) frees the rest of that window at once, as it frees its amounts.
- `calendar_of` reads the calendar of the brain's sites and links: what held reservations
  and cross-brain parts take over their windows. Its free amount now is the snapshot's, but
  on a link that flows cross (below).
- Flows (`FlowHold`): a reservation taken with `reserve_many`, or a cross-brain part taken
  with `take_many`, may hold bandwidth on links over windows of its own (staging before its
  job starts, delivery after it ends). They are not in the `used` columns: the calendar
  counts each over its window, the snapshot the most they hold on each link at once (of
  those not ended), and a batch that takes bandwidth on a link some flow holds (or that
  holds flows itself) must fit that link's calendar over time as well, checked under the
  link rows' locks. Every flow stored holds, whoever's it is: releasing a reservation
  (`release`) or a part (`drop_flows`, in the same transaction) deletes its flows, but its
  delivery when asked to keep it (its job completed: its results still move).
- Nodes (`cnbrain.ledger.nodes`): on a site with node pools, a claim also takes the nodes
  of its gang, chosen here under the site rows' locks: those it names (`Claim.node_takes`,
  the admission round's plan) when they are its gang's and hold it, else on the first pool
  whose nodes hold it (less what every stored node take holds, whatever its window), and
  stored as node takes
  (`node_takes`); a gang that no pool holds is a CapacityConflict. A node take lives as long
  as its holder holds: stored with it, deleted with its release (`give_back_many`) in the
  same transaction (`check_invariants` checks that no other is left). The snapshot
  summarises what the takes leave free.
- The statements of each dialect are in `ledger_sql`, chosen by the session's dialect.
- Nothing here commits: the caller owns the transaction.
"""

import json
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Row,
    Select,
    delete,
    func,
    insert,
    join,
    literal,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.site import NodePool
from cnbrain.domain.states import HOLDING, ReservationState
from cnbrain.ledger.audit import Usage
from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.ledger.claim import DELIVERY, FLOW_KINDS, MAX_FLOW_MBPS, Claim, FlowHold
from cnbrain.ledger.keys import (
    SITE_COMPUTE,
    ResourceKey,
    accelerator_key,
    demand_of,
    link_key,
    site_key,
)
from cnbrain.ledger.nodes import (
    NodeConflict,
    NodeState,
    NodeTake,
    Pool,
    PoolReport,
    PoolSummary,
    pick_on,
    planned_on,
)
from cnbrain.ledger.snapshot import Snapshot, all_free, site_pools, summaries_of
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import node_reports, room_holds
from cnbrain.storage._sql import execute_counted, fetch_scalar
from cnbrain.storage.clock import epoch_s, moment_of, utcnow
from cnbrain.storage.errors import CapacityConflict, LedgerStoreError, QuotaExceeded
from cnbrain.storage.ledger_sql import (
    QUOTA_COLUMNS,
    REPORTED_DOWN,
    SITE_RESOURCES,
    Sums,
    give_back,
    ledger_sql,
    link_status,
    with_link_states,
)
from cnbrain.storage.models import (
    LinkCapacity,
    LinkRecord,
    NodeTakeRecord,
    PeerReservation,
    PeerReservationLink,
    Quota,
    ReservationFlow,
    ReservationFlowLink,
    ReservationLink,
    ReservationRecord,
    SiteAccelerators,
    SiteCapacity,
    SiteRecord,
)
from cnbrain.storage.registry import ACTIVE

__all__ = [
    "OVERDUE_S",
    "CapacityConflict",
    "LedgerStoreError",
    "QuotaExceeded",
    "calendar_of",
    "check_invariants",
    "claim_of_row",
    "drop_flows",
    "flows_of",
    "give_back_many",
    "held_claims",
    "held_flows",
    "held_reservations",
    "load_snapshot",
    "node_summaries",
    "node_takes_ending",
    "release",
    "reservation_links",
    "reserve_many",
    "take_many",
    "usages",
]

OVERDUE_S = 1
"""How long the calendar holds a reservation or part that is still held after its window
ended, from now: its end is not known (its job is in the backend's grace, or its release is
not written yet), so it holds what it took now, and a calendar read later sees it again."""
_HOLDING = sorted(HOLDING)
"""States of a cross-brain reservation part that hold capacity (see peer_ledger)."""


def claim_of_row(
    row: ReservationRecord | PeerReservation | Row[*tuple[Any, ...]], *, link_ids: Sequence[str]
) -> Claim:
    """The claim that a stored reservation or cross-brain part (or a row of their columns)
    holds, on `link_ids`, over its window. A reservation counts against the quota; a part
    when it says so."""
    return Claim(
        reservation_id=row.id,
        request_id=row.request_id,
        tenant_id=row.tenant_id,
        site_id=row.site_id,
        cpu_m=row.cpu_m,
        mem_mib=row.mem_mib,
        storage_gib=row.storage_gib,
        accelerator_model=row.accelerator_model,
        accelerator_milli=row.accelerator_milli,
        link_ids=tuple(link_ids),
        mbps=row.mbps,
        window=Window(epoch_s(row.start_at), epoch_s(row.end_at)),
        counts_quota=True if isinstance(row, ReservationRecord) else bool(row.counts_quota),
    )


async def load_snapshot(session: AsyncSession, *, arrays: MapArrays, version: int = 0) -> Snapshot:
    """Free capacity now (cap - used - external, never below 0) in the order of `arrays`.
    A link shows less the most its flows hold on it at once, from now until the last of them
    ends (whenever their windows are): a request decided on the snapshot holds from now, and
    what it takes then fits the link's calendar over time.

    Retired sites and links, and links reported down (`storage.link_states`), show nothing
    free. A node pool shows what the brain's own reservations leave free on it, bounded by
    what the site's scheduler reports free on it less the takes of the reservations whose
    jobs the report does not show running yet (`storage.node_reports`, while the report has
    not expired). Raises LedgerStoreError naming a site or link of `arrays` that the
    database does not know.
    """
    n, m = arrays.n_sites, len(arrays.accelerator_column)
    site_index, link_index = arrays.map.site_index, arrays.link_index
    cpu, mem, storage = (np.zeros(n, dtype=np.int64) for _ in range(3))
    acc = np.zeros((n, m), dtype=np.int64)
    mbps = np.zeros(len(arrays.map.links), dtype=np.int64)
    site_rows, pool_rows, link_rows = await ledger_sql(session).free_capacity()
    seen_sites: set[str] = set()
    for site_id, status, free_cpu, free_mem, free_storage in site_rows:
        i = site_index.get(site_id)
        if i is None:
            continue
        seen_sites.add(site_id)
        if status == ACTIVE:
            cpu[i], mem[i], storage[i] = free_cpu, free_mem, free_storage
    missing = [s.id for s in arrays.map.sites if s.id not in seen_sites]
    if missing:
        raise LedgerStoreError(f"site {missing[0]!r} is not in the database")
    columns = arrays.accelerator_column
    for site_id, model, free, status in pool_rows:
        i, column = site_index.get(site_id), columns.get(model)
        if i is not None and column is not None and status == ACTIVE:
            acc[i, column] = free
    seen_links: set[str] = set()
    for link_id, status, free in link_rows:
        j = link_index.get(link_id)
        if j is None:
            continue
        seen_links.add(link_id)
        if status == ACTIVE:
            mbps[j] = free
    missing = [link for link in link_index if link not in seen_links]
    if missing:
        raise LedgerStoreError(f"link {missing[0]!r} is not in the database")
    flows = [flow for flow, _ in await _flows(session, now=epoch_s(utcnow()))]
    for link_id, peak in _peak_flows(flows).items():
        j = link_index.get(link_id)
        if j is not None:
            mbps[j] = max(0, mbps[j] - peak)
    pools = {arrays.map.sites[i].id: p for i, p in site_pools(arrays).items()}
    states = await _node_states(session, pools, every_site=True)
    nodes = dict(all_free(arrays))
    for site_id, site_states in states.items():
        site = site_index[site_id]
        nodes[site] = summaries_of(arrays, site, site_states)
    reports = await node_reports.current(session, pools=pools)
    unshown = await node_reports.unshown(session, pools={s: pools[s] for s in reports})
    for site_id, reported in reports.items():
        site = site_index[site_id]
        nodes[site] = _within(nodes[site], reported, unshown.get(site_id))

    return Snapshot.of_free(
        arrays,
        version=version,
        free_cpu_m=cpu,
        free_mem_mib=mem,
        free_storage_gib=storage,
        free_acc=acc,
        residual_mbps=mbps,
        nodes=nodes,
    )


def _within(
    summaries: tuple[PoolSummary, ...],
    reported: tuple[PoolReport | None, ...],
    unshown: tuple[node_reports.Unshown, ...] | None,
) -> tuple[PoolSummary, ...]:
    """`summaries` (a site's pools) each bounded by its pool's report, if any, less what the
    report does not show yet (`unshown`); `summaries` itself when no report takes anything
    more away."""
    bounded = []
    for i, (mine, theirs) in enumerate(zip(summaries, reported, strict=True)):
        if theirs is None:
            bounded.append(mine)
            continue
        told = theirs.summary
        if unshown is not None:
            told = told.less(unshown[i].takes, unshown[i].opened)
        bounded.append(mine.within(told, shared=theirs.shards))
    if all(a is b for a, b in zip(bounded, summaries, strict=True)):
        return summaries
    return tuple(bounded)


async def _node_states(
    session: AsyncSession, pools: dict[str, tuple[Pool, ...]], *, every_site: bool = False
) -> dict[str, list[NodeState]]:
    """Per site of `pools` that some node take holds nodes of, the state of each of its
    pools' nodes with every take applied (`every_site`: `pools` names every site with pools,
    so no site filter is needed). The takes are summed per node (and shared accelerator) and
    shape by the database, so the rows read are the shapes held on each node in use, not the
    takes. A sum that no longer fits its pool (the site's pools were changed since) is left
    out."""
    if not pools:
        return {}
    t = NodeTakeRecord

    def total(column: Any) -> Any:
        return func.sum(column).cast(BigInteger)

    keys = (t.site_id, t.pool, t.node)
    query = select(
        *keys,
        total(t.devices),
        t.shared,
        total(t.milli),
        total(t.cpu_m),
        total(t.mem_mib),
        func.count(),
    ).group_by(*keys, t.shared, t.devices, t.milli)
    if not every_site:
        query = query.where(t.site_id.in_(sorted(pools)))
    states: dict[str, list[NodeState]] = {}
    for site_id, *amounts, takes in await session.execute(query):
        site_pools_ = pools.get(site_id)
        if site_pools_ is None:
            continue
        site_states = states.get(site_id)
        if site_states is None:
            site_states = states[site_id] = [NodeState(pool) for pool in site_pools_]
        take = NodeTake(*amounts)
        if 0 <= take.pool < len(site_states):
            try:
                site_states[take.pool].apply(take, takes=takes)
            except NodeConflict:
                continue
    return states


async def node_takes_ending(
    session: AsyncSession, *, site_ids: Collection[str]
) -> dict[str, list[tuple[int, str, NodeTake]]]:
    """Per site of `site_ids` with node takes, each take of a held reservation or of a
    prepared or held cross-brain part, with the epoch second its holder ends and the
    holder's request (`node_starts.earliest_on_nodes`). Two statements."""
    if not site_ids:
        return {}
    t = NodeTakeRecord
    columns = (t.site_id, t.pool, t.node, t.devices, t.shared, t.milli, t.cpu_m, t.mem_mib)
    found: dict[str, list[tuple[int, str, NodeTake]]] = {}
    for holder, holding in (
        (ReservationRecord, ReservationRecord.state == ReservationState.HELD),
        (PeerReservation, PeerReservation.state.in_(_HOLDING)),
    ):
        rows = await session.execute(
            select(*columns, holder.end_at, holder.request_id)
            .join(holder, holder.id == t.holder_id)
            .where(t.site_id.in_(sorted(site_ids)), holding)
        )
        for site_id, *amounts, end_at, request_id in rows:
            take = NodeTake(*amounts)
            found.setdefault(site_id, []).append((epoch_s(end_at), request_id, take))
    return found


async def node_summaries(
    session: AsyncSession, *, pools: dict[str, tuple[Pool, ...]]
) -> dict[str, tuple[PoolSummary, ...]]:
    """Per site of `pools`, what the stored node takes (those of the held reservations and
    the prepared or held parts) leave free on each of its pools, as the snapshot
    summarises it."""
    states = await _node_states(session, pools)
    return {
        site: tuple(state.summary() for state in states[site])
        if site in states
        else tuple(map(PoolSummary.empty, site_pools_))
        for site, site_pools_ in pools.items()
    }


@lru_cache(maxsize=4096)
def _parsed_pools(raw: str) -> tuple[Pool, ...]:
    """The pools of a site document's `node_pools` (its JSON)."""
    return tuple(Pool.of(NodePool.model_validate(pool)) for pool in json.loads(raw))


async def _node_rows(
    session: AsyncSession, claims: Sequence[Claim], pools: dict[str, tuple[Pool, ...]]
) -> list[dict[str, Any]]:
    """The node takes (rows of `node_takes`) of each of `claims` on a site of `pools` (the
    node pools of the claims' sites that have any), chosen as the module docstring says; the
    caller holds the site rows' locks and stores them. Raises CapacityConflict naming the
    site when no pool's nodes hold a claim's gang."""
    pooled = [c for c in claims if c.site_id in pools]
    if not pooled:
        return []
    states = await _node_states(session, pools)
    rows: list[dict[str, Any]] = []
    for claim in pooled:
        site = claim.site_id or ""
        if site not in states:
            states[site] = [NodeState(pool) for pool in pools[site]]
        gang = claim.gang
        picked = planned_on(states[site], gang, claim.node_takes) or pick_on(states[site], gang)
        if picked is None:
            raise CapacityConflict(
                f"site {site!r} nodes",
                f"no node pool has {claim.nodes} node(s) with its share of "
                f"{claim.reservation_id!r} free",
            )
        for take in picked:
            states[site][take.pool].apply(take)
            rows.append({"holder_id": claim.reservation_id, "site_id": site, **asdict(take)})
    return rows


@dataclass(frozen=True, slots=True)
class HeldWindow:
    """One holding of a calendar (`calendar_and_holdings`): what the reservation or part of
    `request_id` (or, when it names none, of id `reservation_id`) takes of each resource
    (`demand`, over `ledger.keys`), over `window`, as the calendar counts it."""

    request_id: str
    demand: dict[ResourceKey, int]
    window: Window


async def calendar_of(
    session: AsyncSession, *, arrays: MapArrays, now: int
) -> Calendar[ResourceKey]:
    """`calendar_and_holdings`' calendar."""
    calendar, _ = await calendar_and_holdings(session, arrays=arrays, now=now)
    return calendar


async def calendar_and_holdings(
    session: AsyncSession, *, arrays: MapArrays, now: int
) -> tuple[Calendar[ResourceKey], list[HeldWindow]]:
    """The calendar of `arrays`' sites and links from epoch second `now` on (keys as
    `ledger.keys` names them; a site has an accelerator key for each model of `arrays` it
    has a pool of).

    Each resource's capacity is what is not used from outside: cap - external, never below
    0, and 0 on a retired site or link and on a link reported down, as `load_snapshot`
    counts it. Every held reservation and every prepared or held cross-brain part takes its
    amounts over its window, from now on: a window that has ended holds nothing, unless the
    reservation or part is still held then (its end passed, its release not yet written);
    that one holds over [now, now + OVERDUE_S). So the free amount of every resource at
    `now` is the snapshot's (`load_snapshot`), whenever the `used` columns sum the holdings
    (`check_invariants`), but on a link that flows cross, where the snapshot counts the most
    they hold at once. A released reservation or part holds nothing: its release gave back
    the rest of its window. Every flow takes its bandwidth over its own window, until that
    ends. On a resource whose holdings exceed its capacity (caps lowered, or external use
    reported after the reservations were taken) each window takes only what is still free
    over it, so nothing goes below 0, as in the snapshot. What lies outside `arrays`' map is
    left out.

    With it, every holding as it counts it: its demand on `arrays`' map and its window (the
    overdue ones over [now, now + OVERDUE_S)), before capping at what is free.

    It reads with several statements in the caller's transaction: for one consistent view
    under concurrent writers, run it in a REPEATABLE READ (snapshot) transaction. Raises
    LedgerStoreError naming a site or link of `arrays` that the database does not know;
    Invalid (from the calendar) when `now` is not an integer.
    """
    site_index, link_index = arrays.map.site_index, arrays.link_index
    capacities: dict[ResourceKey, int] = {}
    c, s = SiteCapacity, SiteRecord
    seen: set[str] = set()
    for site_id, status, *amounts in await session.execute(
        select(
            c.site_id,
            s.status,
            c.cpu_m_cap - c.cpu_m_external,
            c.mem_mib_cap - c.mem_mib_external,
            c.storage_gib_cap - c.storage_gib_external,
        ).join(s, s.id == c.site_id)
    ):
        i = site_index.get(site_id)
        if i is None:
            continue
        seen.add(site_id)
        for resource, amount in zip(SITE_COMPUTE, amounts, strict=True):
            capacities[site_key(i, resource)] = _capacity(status, amount)
    missing = [site.id for site in arrays.map.sites if site.id not in seen]
    if missing:
        raise LedgerStoreError(f"site {missing[0]!r} is not in the database")
    a = SiteAccelerators
    for site_id, model, status, amount in await session.execute(
        select(a.site_id, a.model, s.status, a.cap - a.external).join(s, s.id == a.site_id)
    ):
        i = site_index.get(site_id)
        if i is not None and model in arrays.accelerator_column:
            capacities[accelerator_key(i, model)] = _capacity(status, amount)
    seen = set()
    for link_id, amount in (await _link_capacities(session)).items():
        j = link_index.get(link_id)
        if j is not None:
            seen.add(link_id)
            capacities[link_key(j)] = amount
    missing = [link for link in link_index if link not in seen]
    if missing:
        raise LedgerStoreError(f"link {missing[0]!r} is not in the database")

    calendar: Calendar[ResourceKey] = Calendar(capacities, now=now)
    holdings = sorted(
        await _holding_claims(session), key=lambda held: (held.window.start, held.reservation_id)
    )
    held: list[HeldWindow] = []
    for claim in holdings:
        window = _held_window(claim, now)
        on_map = replace(
            claim,
            site_id=claim.site_id if claim.site_id in site_index else None,
            link_ids=tuple(link for link in claim.link_ids if link in link_index),
        )
        demand = demand_of(on_map, arrays=arrays)
        calendar.take_what_is_free(demand, window)
        held.append(HeldWindow(claim.request_id or claim.reservation_id, demand, window))
    for flow, request_id in await _flows(session, now=now):
        demand = {
            link_key(link_index[link]): flow.mbps for link in flow.link_ids if link in link_index
        }
        calendar.take_what_is_free(demand, flow.window)
        held.append(HeldWindow(request_id, demand, flow.window))
    return calendar, held


def _peak_flows(flows: Sequence[FlowHold]) -> dict[str, int]:
    """Per link, the most bandwidth `flows` hold on it at once."""
    edges: dict[str, list[tuple[int, int]]] = {}
    for flow in flows:
        for link in flow.link_ids:
            edges.setdefault(link, []).extend(
                ((flow.window.start, flow.mbps), (flow.window.end, -flow.mbps))
            )
    peaks: dict[str, int] = {}
    for link, changes in edges.items():
        held = peak = 0
        for _, delta in sorted(changes):  # an end before a start at one second
            held += delta
            peak = max(peak, held)
        peaks[link] = peak
    return peaks


async def _link_capacities(
    session: AsyncSession, link_ids: Collection[str] | None = None
) -> dict[str, int]:
    """What each link (of `link_ids`, or every link) offers: cap - external, 0 when retired
    or reported down."""
    lc, lr = LinkCapacity, LinkRecord
    query = select(lc.link_id, link_status(), lc.mbps_cap - lc.mbps_external).select_from(
        with_link_states(join(lc, lr, lr.id == lc.link_id))
    )
    if link_ids is not None:
        query = query.where(lc.link_id.in_(sorted(link_ids)))
    return {
        link_id: _capacity(status, amount)
        for link_id, status, amount in await session.execute(query)
    }


async def _flows(
    session: AsyncSession,
    *,
    now: int,
    request_id: str | None = None,
    reservation_ids: Collection[str] | None = None,
    on_links: Collection[str] | None = None,
    under_way: bool = False,
) -> list[tuple[FlowHold, str]]:
    """The flows whose window ends after `now` (of one request, of `reservation_ids`, or
    crossing one of `on_links`, when named; with `under_way`, only those that started by
    `now`), each with the request id of its reservation or cross-brain part (its
    reservation id when it has neither: a part being prepared in this transaction), by
    start."""
    f, r, p, fl = ReservationFlow, ReservationRecord, PeerReservation, ReservationFlowLink
    request = func.coalesce(r.request_id, p.request_id, f.reservation_id)
    query = (
        select(f, request)
        .outerjoin(r, r.id == f.reservation_id)
        .outerjoin(p, p.id == f.reservation_id)
        .where(f.end_at > moment_of(now))
        .order_by(f.start_at, f.id)
    )
    if request_id is not None:
        query = query.where(request == request_id)
    if reservation_ids is not None:
        query = query.where(f.reservation_id.in_(sorted(reservation_ids)))
    if under_way:
        query = query.where(f.start_at <= moment_of(now))
    if on_links is not None:
        crossing = select(fl.flow_id).where(fl.link_id.in_(sorted(on_links)))
        query = query.where(f.id.in_(crossing))
    rows = (await session.execute(query)).all()
    if not rows:
        return []
    routes: dict[str, list[str]] = {}
    for flow_id, link_id in await session.execute(
        select(fl.flow_id, fl.link_id)
        .where(fl.flow_id.in_([row.id for row, _ in rows]))
        .order_by(fl.flow_id, fl.position)
    ):
        routes.setdefault(flow_id, []).append(link_id)
    return [
        (
            FlowHold(
                reservation_id=row.reservation_id,
                kind=row.kind,
                peer=row.peer,
                link_ids=tuple(routes.get(row.id, ())),
                mbps=row.mbps,
                window=Window(epoch_s(row.start_at), epoch_s(row.end_at)),
            ),
            request_id,
        )
        for row, request_id in rows
    ]


def _held_window(claim: Claim, now: int) -> Window:
    """The window over which `claim`, still held, holds from `now`: its own, or, once it has
    ended (its release not yet written), [now, now + OVERDUE_S)."""
    return claim.window if claim.window.end > now else Window.of(now, OVERDUE_S)


def _capacity(status: str, amount: int) -> int:
    """What a site's or link's row of `status` offers of a resource with `amount` not used
    from outside: nothing when retired, never below 0."""
    return max(0, int(amount)) if status == ACTIVE else 0


async def _holding_claims(
    session: AsyncSession, *, on_links: Collection[str] | None = None
) -> list[Claim]:
    """The claims of every held reservation and of every prepared or held cross-brain part
    (one query for each, and one for the links of each); of those crossing one of
    `on_links` only, when named."""
    r, rl = ReservationRecord, ReservationLink
    p, pl = PeerReservation, PeerReservationLink
    found: list[Claim] = []
    for rows, links, link_table in (
        (
            select(*_claim_columns(r), literal(True).label("counts_quota")).where(
                r.state == ReservationState.HELD
            ),
            select(rl.reservation_id, rl.link_id)
            .join(r, r.id == rl.reservation_id)
            .where(r.state == ReservationState.HELD),
            rl,
        ),
        (
            select(*_claim_columns(p), p.counts_quota).where(p.state.in_(_HOLDING)),
            select(pl.reservation_id, pl.link_id)
            .join(p, p.id == pl.reservation_id)
            .where(p.state.in_(_HOLDING)),
            pl,
        ),
    ):
        if on_links is not None:
            crossing = select(link_table.reservation_id).where(
                link_table.link_id.in_(sorted(on_links))
            )
            rows = rows.where(rows.selected_columns.id.in_(crossing))
            links = links.where(link_table.reservation_id.in_(crossing))
        # The rows before their links: a reservation taken in between (under READ COMMITTED)
        # is left out whole, not counted without its links.
        held = (await session.execute(rows)).all()
        link_ids: dict[str, list[str]] = {}
        for reservation_id, link_id in await session.execute(links):
            link_ids.setdefault(reservation_id, []).append(link_id)
        found += [claim_of_row(row, link_ids=sorted(link_ids.get(row.id, ()))) for row in held]
    return found


def _claim_columns(table: type[ReservationRecord] | type[PeerReservation]) -> tuple[Any, ...]:
    """The columns of `table` that `claim_of_row` reads, but `counts_quota`."""
    return (
        table.id,
        table.request_id,
        table.tenant_id,
        table.site_id,
        table.cpu_m,
        table.mem_mib,
        table.storage_gib,
        table.accelerator_model,
        table.accelerator_milli,
        table.mbps,
        table.start_at,
        table.end_at,
    )


async def reserve_many(
    session: AsyncSession,
    *,
    claims: Sequence[Claim],
    flows: Sequence[FlowHold] = (),
    lock_tenants: Collection[str] = (),
) -> None:
    """Take every claim of `claims` as a held reservation (under its `reservation_id`) inside
    the caller's transaction: all of them, or raise and leave the caller to roll back (earlier
    updates of the call may have been applied). Each needs a site and counts against its
    tenant's quota; the claims on one site, accelerator pool, link or tenant are added up and
    must fit together, leaving the room held for other requests (module docstring); the
    holds of the claims' requests end. `flows` are held with them, each for the reservation
    of one of `claims`, over its own window; every link they and the claims cross must fit
    its calendar over time (module docstring).

    The quota rows of `lock_tenants` are locked too, with those of the claims' tenants and in
    the same order (so still without deadlock), and stay locked until the caller's
    transaction ends: a caller that checks a rule over several tenants' holdings (a cohort's
    quota) checks it after this returns, while no other reservation of theirs can be taken.

    Raises CapacityConflict (naming a site, pool or link that is short, retired or unknown),
    QuotaExceeded (naming the tenant's limit), or LedgerStoreError (a malformed claim, a
    reservation id given twice or in use, an unknown request, a tenant without quota row).
    Nothing happens for an empty `claims`.
    """
    if not claims:
        return
    held = [_reservation(claim) for claim in claims]
    ids = [claim.reservation_id for claim in held]
    if len(set(ids)) != len(ids):
        raise LedgerStoreError("a reservation id appears more than once")
    _check_belong(held, flows)
    await _take(session, held, store=held, flows=flows, lock_tenants=lock_tenants)


async def take_many(
    session: AsyncSession,
    *,
    claims: Sequence[Claim],
    flows: Sequence[FlowHold] = (),
    lock_tenants: Collection[str] = (),
) -> None:
    """Take the amounts of every claim of `claims` inside the caller's transaction, as
    `reserve_many` does but without storing reservations: compute on its site (none when its
    site is None), bandwidth on its links, and the tenant's quota (when it counts it). All of
    them, or raise as `reserve_many` does and leave the caller to roll back; the quota rows
    of `lock_tenants` are locked as `reserve_many` locks them, and room holds count and end
    as there. `flows`, each of one of `claims` (by reservation id), are checked and stored
    as `reserve_many` holds them; the caller deletes them (`drop_flows`) when it gives the
    claims back. Nothing happens for an empty `claims`."""
    if claims:
        _check_belong(claims, flows)
        await _take(session, claims, store=(), flows=flows, lock_tenants=lock_tenants)


def _check_belong(claims: Sequence[Claim], flows: Sequence[FlowHold]) -> None:
    """LedgerStoreError unless every flow of `flows` is of a claim of `claims`."""
    strays = sorted({flow.reservation_id for flow in flows} - {c.reservation_id for c in claims})
    if strays:
        raise LedgerStoreError(f"flows of reservation {strays[0]!r}, not among the claims")


def _reservation(claim: Claim) -> Claim:
    """`claim`, checked to be one a reservation can hold: on a site, counting the quota."""
    if claim.site_id is None or not claim.counts_quota:
        raise LedgerStoreError(
            f"claim for request {claim.request_id!r}: a reservation needs a site and counts"
            " against the quota"
        )
    return claim


async def _take(
    session: AsyncSession,
    claims: Sequence[Claim],
    *,
    store: Sequence[Claim],
    flows: Sequence[FlowHold] = (),
    lock_tenants: Collection[str] = (),
) -> None:
    """Lock, check and take the sums of `claims` and insert `store` as held reservations
    with `flows`; the quota rows of `lock_tenants` are locked with the claims' own."""
    for claim in claims:
        _validate(claim)
    for flow in flows:
        _validate_flow(flow)
    sums = _sums_of(claims)
    sql = ledger_sql(session)
    links = sorted(
        {link for claim in claims for link in claim.link_ids}
        | {link for flow in flows for link in flow.link_ids}
    )
    pools: dict[str, tuple[Pool, ...]] = {}
    if sums.sites:
        sites = await sql.share_lock_sites(sorted(sums.sites))
        for site in sorted(sums.sites):
            status, raw = sites.get(site, (None, None))
            if status != ACTIVE:
                raise CapacityConflict(f"site {site!r}", "not registered, or retired")
            if raw:
                pools[site] = _parsed_pools(json.dumps(raw, sort_keys=True))
    if links:
        statuses = await sql.share_lock_links(links)
        for link in links:
            status = statuses.get(link)
            if status == REPORTED_DOWN:
                raise CapacityConflict(f"link {link!r}", "reported down by its operator")
            if status != ACTIVE:
                raise CapacityConflict(f"link {link!r}", "not registered, or retired")
    held = _Held()
    if sums.sites:
        free_sites = await sql.lock_sites(sorted(sums.sites))
        held = await _held_for_others(session, claims, sums.sites)
        for site in sorted(sums.sites):
            if site not in free_sites:
                raise CapacityConflict(f"site {site!r}", "has no capacity row")
            for (name, _), want, free, kept in zip(
                SITE_RESOURCES,
                sums.sites[site],
                free_sites[site],
                held.sites.get(site, (0, 0, 0)),
                strict=True,
            ):
                _fit(f"site {site!r} {name}", want, free, kept)
    if sums.pools:
        free_pools = await sql.lock_pools(sorted(sums.pools))
        for site, model in sorted(sums.pools):
            _fit(
                f"site {site!r} {model}",
                sums.pools[site, model],
                free_pools.get((site, model), 0),
                held.pools.get((site, model), 0),
            )
    timed = sorted(set(sums.bandwidth) | {link for flow in flows for link in flow.link_ids})
    if timed:
        free_links = await sql.lock_links(timed, utcnow())
        for link in sorted(sums.bandwidth):
            free_mbps = free_links.get(link, (0, False))[0]
            _fit(f"link {link!r} bandwidth", sums.bandwidth[link], free_mbps)
        if flows or any(crossed for _, crossed in free_links.values()):
            await _fit_over_time(session, claims, flows, timed)
    if sums.quotas or lock_tenants:
        found = await sql.lock_quotas(sorted(set(sums.quotas) | set(lock_tenants)))
        for tenant in sorted(sums.quotas):
            if tenant not in found:
                raise LedgerStoreError(f"tenant {tenant!r} has no quota row")
            for (name, _, _), need, left in zip(
                QUOTA_COLUMNS, sums.quotas[tenant], found[tenant], strict=True
            ):
                if left is not None and need > left:
                    raise QuotaExceeded(f"tenant {tenant!r} {name}", f"wants {need}, {left} left")
    nodes = await _node_rows(session, claims, pools) if pools else []
    # Every row is locked and checked: take the sums and store the reservations.
    try:
        changed = await sql.take(sums, store, utcnow())
        if nodes:
            await session.execute(insert(NodeTakeRecord), nodes)
        if flows:
            await _insert_flows(session, flows)
    except IntegrityError as exc:
        raise LedgerStoreError(
            f"reservations, flows or node takes cannot be stored (an id in use, or an unknown "
            f"request): "
            f"{exc.orig or exc}"
        ) from None
    for keys, count, what in (
        (sums.sites, changed[0], "sites"),
        (sums.pools, changed[1], "accelerator pools"),
        (sums.bandwidth, changed[2], "links"),
        (sums.quotas, changed[3], "the quotas of"),
    ):
        if count != len(keys):
            names = ", ".join(sorted(str(k) for k in keys))
            raise CapacityConflict(f"{what} {names}", "changed concurrently; try again")


async def _insert_flows(session: AsyncSession, flows: Sequence[FlowHold]) -> None:
    """Store `flows`, numbered within their reservation, with their routes."""
    rows: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    numbers: dict[str, int] = {}
    for flow in flows:
        number = numbers.get(flow.reservation_id, 0)
        numbers[flow.reservation_id] = number + 1
        flow_id = f"{flow.reservation_id}/{number}"
        rows.append(
            {
                "id": flow_id,
                "reservation_id": flow.reservation_id,
                "kind": flow.kind,
                "peer": flow.peer,
                "mbps": flow.mbps,
                "start_at": moment_of(flow.window.start),
                "end_at": moment_of(flow.window.end),
            }
        )
        links += [
            {"flow_id": flow_id, "position": i, "link_id": link}
            for i, link in enumerate(flow.link_ids)
        ]
    await session.execute(insert(ReservationFlow), rows)
    await session.execute(insert(ReservationFlowLink), links)


async def _fit_over_time(
    session: AsyncSession, claims: Sequence[Claim], flows: Sequence[FlowHold], links: Sequence[str]
) -> None:
    """CapacityConflict unless the bandwidth of `claims` and `flows` fits the calendar of
    `links` (rows the caller has locked) over time, with every holding and flow on them."""
    now = epoch_s(utcnow())
    wanted = set(links)
    calendar: Calendar[str] = Calendar(await _link_capacities(session, wanted), now=now)

    def on_links(link_ids: Sequence[str], mbps: int) -> dict[str, int]:
        return {link: mbps for link in link_ids if link in wanted and mbps}

    for claim in await _holding_claims(session, on_links=wanted):
        window = _held_window(claim, now)
        calendar.take_what_is_free(on_links(claim.link_ids, claim.mbps), window)
    for flow, _ in await _flows(session, now=now, on_links=wanted):
        calendar.take_what_is_free(on_links(flow.link_ids, flow.mbps), flow.window)
    asked = [(on_links(c.link_ids, c.mbps), c.window) for c in claims]
    asked += [(on_links(f.link_ids, f.mbps), f.window) for f in flows]
    for demand, window in asked:
        if window.end <= now or not demand:
            continue
        over = Window(max(window.start, now), window.end)
        for link, mbps in sorted(demand.items()):
            least = calendar.profile(link).min_free(over)
            if least < mbps:
                raise CapacityConflict(
                    f"link {link!r} bandwidth",
                    f"wants {mbps} over [{over.start}, {over.end}), {max(least, 0)} free there",
                )
        calendar.take(demand, over)


def _fit(where: str, want: int, free: int, held: int = 0) -> None:
    """CapacityConflict unless `want` fits what is `free` but what is `held` for other
    requests."""
    if want > free - held:
        kept = f" ({held} held for another request)" if held else ""
        raise CapacityConflict(where, f"wants {want}, {max(free - held, 0)} free{kept}")


@dataclass(frozen=True, slots=True)
class _Held:
    """The room held for other requests, summed per site (cpu, memory, storage) and per
    accelerator pool (site, model)."""

    sites: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    pools: dict[tuple[str, str], int] = field(default_factory=dict)


async def _held_for_others(
    session: AsyncSession, claims: Sequence[Claim], sites: Collection[str]
) -> _Held:
    """The room held on `sites` (rows the caller has locked) for requests without a claim in
    `claims` on a site, by the holds that last beyond now; the holds of the requests of the
    claims on a site end here (deleted: their requests take compute on this brain now,
    which replaces them)."""
    requests = {claim.request_id for claim in claims if claim.site_id is not None}
    holds = await room_holds.active_on(session, site_ids=sites, request_ids=requests, now=utcnow())
    await room_holds.end(
        session, {hold.request_id for hold in holds if hold.request_id in requests}
    )
    per_site: dict[str, list[int]] = {}
    pools: dict[tuple[str, str], int] = {}
    for hold in holds:
        if hold.request_id in requests or hold.site_id not in sites:
            continue
        _add(per_site, hold.site_id, (hold.cpu_m, hold.mem_mib, hold.storage_gib))
        if hold.accelerator_model and hold.accelerator_milli:
            pool = (hold.site_id, hold.accelerator_model)
            pools[pool] = pools.get(pool, 0) + hold.accelerator_milli
    return _Held({site: (a[0], a[1], a[2]) for site, a in per_site.items()}, pools)


def _sums_of(claims: Sequence[Claim]) -> Sums:
    """What `claims` take, summed per row."""
    sites: dict[str, list[int]] = {}
    pools: dict[tuple[str, str], int] = {}
    bandwidth: dict[str, int] = {}
    quotas: dict[str, list[int]] = {}
    for claim in claims:
        if claim.site_id is not None:
            _add(sites, claim.site_id, (claim.cpu_m, claim.mem_mib, claim.storage_gib))
            if claim.accelerator_milli and claim.accelerator_model:
                pool = (claim.site_id, claim.accelerator_model)
                pools[pool] = pools.get(pool, 0) + claim.accelerator_milli
        if claim.mbps:
            for link in claim.link_ids:
                bandwidth[link] = bandwidth.get(link, 0) + claim.mbps
        if claim.counts_quota:
            amounts = (claim.cpu_m, claim.mem_mib, claim.accelerator_milli, claim.mbps, 1)
            _add(quotas, claim.tenant_id, amounts)
    return Sums(sites=sites, pools=pools, bandwidth=bandwidth, quotas=quotas)


def _add(totals: dict[str, list[int]], key: str, amounts: Sequence[int]) -> None:
    total = totals.setdefault(key, [0] * len(amounts))
    for i, amount in enumerate(amounts):
        total[i] += amount


async def give_back_many(session: AsyncSession, *, claims: Sequence[Claim]) -> None:
    """Subtract from the `used` columns what `take_many` added for every claim of `claims`:
    the sums per row, with one UPDATE per table (site capacity, accelerator pools, links,
    quotas), each locking its rows in key order first (the global lock order of
    `take_many`). The caller has marked every claim's reservation released in the same
    transaction, so each is given back once; what they took of nodes is deleted. Nothing
    happens for an empty `claims`."""
    if claims:
        await give_back(session, _sums_of(claims))
        await session.execute(
            delete(NodeTakeRecord).where(
                NodeTakeRecord.holder_id.in_(sorted({c.reservation_id for c in claims}))
            )
        )


async def release(
    session: AsyncSession, *, reservation_id: str, keep_delivery: bool = False
) -> ReservationRecord:
    """Give back everything the reservation took and mark it released; returns the record.
    Its flows are deleted, but its delivery with `keep_delivery` (which then holds until its
    window ends); so are the flows whose window has ended.

    Raises LedgerStoreError if it is unknown or not held (so it is never given back twice).
    """
    taken = await execute_counted(
        session,
        update(ReservationRecord)
        .where(
            ReservationRecord.id == reservation_id, ReservationRecord.state == ReservationState.HELD
        )
        .values(state=ReservationState.RELEASED, released_at=utcnow()),
    )
    record = await fetch_scalar(
        session,
        select(ReservationRecord)
        .where(ReservationRecord.id == reservation_id)
        .execution_options(populate_existing=True),
    )
    if record is None:
        raise LedgerStoreError(f"reservation {reservation_id!r} is unknown")
    if not taken:
        raise LedgerStoreError(f"reservation {reservation_id!r} is not held ({record.state})")
    links = await reservation_links(session, reservation_id=reservation_id)
    await give_back_many(session, claims=[claim_of_row(record, link_ids=links)])
    await drop_flows(session, reservation_ids=[reservation_id], keep_delivery=keep_delivery)
    return record


async def drop_flows(
    session: AsyncSession, *, reservation_ids: Collection[str], keep_delivery: bool = False
) -> None:
    """Delete the flows of `reservation_ids` (reservations or cross-brain parts the caller
    releases in its transaction), but their delivery with `keep_delivery`, which then
    holds until its window ends; and every flow whose window has ended. Two statements."""
    f, fl = ReservationFlow, ReservationFlowLink
    ended: ColumnElement[bool] = f.reservation_id.in_(sorted(reservation_ids))
    if keep_delivery:
        ended = ended & (f.kind != DELIVERY)
    gone = select(f.id).where(ended | (f.end_at <= utcnow()))
    await session.execute(delete(fl).where(fl.flow_id.in_(gone)))
    await session.execute(delete(f).where(f.id.in_(gone)))


async def reservation_links(session: AsyncSession, *, reservation_id: str) -> list[str]:
    """The link ids of a reservation, sorted."""
    rows = await session.scalars(
        select(ReservationLink.link_id)
        .where(ReservationLink.reservation_id == reservation_id)
        .order_by(ReservationLink.link_id)
    )
    return list(rows)


async def held_reservations(
    session: AsyncSession, *, request_id: str | None = None, tenant_id: str | None = None
) -> list[str]:
    """Ids of the reservations still held, optionally of one request and/or tenant, oldest
    first (pass each to `release`)."""
    query = select(ReservationRecord.id).where(ReservationRecord.state == ReservationState.HELD)
    if request_id is not None:
        query = query.where(ReservationRecord.request_id == request_id)
    if tenant_id is not None:
        query = query.where(ReservationRecord.tenant_id == tenant_id)
    rows = await session.scalars(query.order_by(ReservationRecord.created_at, ReservationRecord.id))
    return list(rows)


async def held_claims(session: AsyncSession, *, request_id: str) -> list[Claim]:
    """The claims of the reservations `request_id` still holds, oldest first; on a site with
    node pools, each with as many `nodes` as its gang takes there, so that the same claim
    taken again takes a gang of as many nodes."""
    claims = []
    for reservation_id in await held_reservations(session, request_id=request_id):
        record = await session.get(ReservationRecord, reservation_id)
        if record is not None:
            links = await reservation_links(session, reservation_id=reservation_id)
            claim = claim_of_row(record, link_ids=links)
            nodes = await session.scalar(
                select(func.count()).where(NodeTakeRecord.holder_id == reservation_id)
            )
            claims.append(replace(claim, nodes=nodes) if nodes else claim)
    return claims


async def held_flows(session: AsyncSession, *, request_id: str) -> list[FlowHold]:
    """The flows of `request_id`'s reservations and cross-brain parts that have not ended,
    by start."""
    return [flow for flow, _ in await _flows(session, now=epoch_s(utcnow()), request_id=request_id)]


async def flows_of(
    session: AsyncSession, *, reservation_ids: Collection[str], now: int
) -> dict[str, list[FlowHold]]:
    """The flows of each of `reservation_ids` (reservations or cross-brain parts) whose
    window ends after epoch second `now`, by start; an id without any has no entry. Two
    statements at most."""
    if not reservation_ids:
        return {}
    found: dict[str, list[FlowHold]] = {}
    for flow, _ in await _flows(session, now=now, reservation_ids=reservation_ids):
        found.setdefault(flow.reservation_id, []).append(flow)
    return found


async def check_invariants(session: AsyncSession, *, require_fit: bool = True) -> None:
    """Raise AssertionError unless every `used` column (sites, accelerators, links, quotas)
    equals the sum over held reservations and over the prepared or held parts of cross-brain
    reservations (`peer_reservations`), and is not negative; with `require_fit`, also
    used + external <= cap and quota use <= limit (true unless caps were lowered or external
    use reported after the reservations were taken); and unless every node take's holder
    holds."""
    for usage in await usages(session):
        _expect(usage, require_fit)
    t, r, p = NodeTakeRecord, ReservationRecord, PeerReservation
    stray = await session.scalar(
        select(t.holder_id)
        .where(
            t.holder_id.not_in(select(r.id).where(r.state == ReservationState.HELD)),
            t.holder_id.not_in(select(p.id).where(p.state.in_(_HOLDING))),
        )
        .limit(1)
    )
    if stray is not None:
        raise AssertionError(f"node takes of {stray!r}, which holds nothing")


async def usages(session: AsyncSession) -> list[Usage]:
    """Every `used` column of the ledger (site compute, accelerator pools, links, quotas) with
    what the held reservations and the prepared or held parts on it sum to; holdings on a
    site, pool, link or tenant without a row come as a usage of 0 with a capacity of 0. A few
    statements per table, in the caller's transaction."""
    return [
        *await _site_usages(session),
        *await _accelerator_usages(session),
        *await _link_usages(session),
        *await _quota_usages(session),
    ]


def _validate_flow(flow: FlowHold) -> None:
    """LedgerStoreError unless `flow` is of a known kind (`FLOW_KINDS`) and holds from 1 to
    `MAX_FLOW_MBPS` on distinct links."""
    where = f"flow of reservation {flow.reservation_id!r}"
    if flow.kind not in FLOW_KINDS:
        raise LedgerStoreError(f"{where}: unknown kind {flow.kind!r}")
    if not 0 < flow.mbps <= MAX_FLOW_MBPS:
        raise LedgerStoreError(f"{where}: mbps must be within 1..{MAX_FLOW_MBPS}")
    if not flow.link_ids or len(set(flow.link_ids)) != len(flow.link_ids):
        raise LedgerStoreError(f"{where}: it needs distinct links")


def _validate(claim: Claim) -> None:
    where = f"claim for request {claim.request_id!r}"
    for name in ("cpu_m", "mem_mib", "storage_gib", "accelerator_milli", "mbps"):
        if getattr(claim, name) < 0:
            raise LedgerStoreError(f"{where}: {name} is negative")
    if claim.accelerator_milli and not claim.accelerator_model:
        raise LedgerStoreError(f"{where}: accelerator_milli without accelerator_model")
    if len(set(claim.link_ids)) != len(claim.link_ids):
        raise LedgerStoreError(f"{where}: a link appears more than once")


async def _site_usages(session: AsyncSession) -> list[Usage]:
    r = ReservationRecord
    held = {
        site: (cpu, mem, storage)
        for site, cpu, mem, storage in await session.execute(
            select(r.site_id, func.sum(r.cpu_m), func.sum(r.mem_mib), func.sum(r.storage_gib))
            .where(r.state == ReservationState.HELD)
            .group_by(r.site_id)
        )
    }
    p = PeerReservation
    for site, cpu, mem, storage in await session.execute(
        select(p.site_id, func.sum(p.cpu_m), func.sum(p.mem_mib), func.sum(p.storage_gib))
        .where(p.state.in_(_HOLDING), p.site_id.is_not(None))
        .group_by(p.site_id)
    ):
        before = held.get(str(site), (0, 0, 0))
        held[str(site)] = (before[0] + cpu, before[1] + mem, before[2] + storage)
    found = []
    for row in await session.scalars(select(SiteCapacity).order_by(SiteCapacity.site_id)):
        expected = held.pop(row.site_id, (0, 0, 0))
        for name, used, external, cap, want in (
            ("cpu", row.cpu_m_used, row.cpu_m_external, row.cpu_m_cap, expected[0]),
            ("memory", row.mem_mib_used, row.mem_mib_external, row.mem_mib_cap, expected[1]),
            (
                "storage",
                row.storage_gib_used,
                row.storage_gib_external,
                row.storage_gib_cap,
                expected[2],
            ),
        ):
            found.append(Usage(f"site {row.site_id!r} {name}", used, int(want), cap, external))
    for site, amounts in sorted(held.items()):
        for name, want in zip(("cpu", "memory", "storage"), amounts, strict=True):
            found.append(Usage(f"site {site!r} {name} (no capacity row)", 0, int(want), 0))
    return found


async def _accelerator_usages(session: AsyncSession) -> list[Usage]:
    r = ReservationRecord
    held = {
        (site, model): count
        for site, model, count in await session.execute(
            select(r.site_id, r.accelerator_model, func.sum(r.accelerator_milli))
            .where(r.state == ReservationState.HELD, r.accelerator_model.is_not(None))
            .group_by(r.site_id, r.accelerator_model)
        )
    }
    p = PeerReservation
    for site, model, count in await session.execute(
        select(p.site_id, p.accelerator_model, func.sum(p.accelerator_milli))
        .where(p.state.in_(_HOLDING), p.site_id.is_not(None), p.accelerator_model.is_not(None))
        .group_by(p.site_id, p.accelerator_model)
    ):
        key = (str(site), model)
        held[key] = held.get(key, 0) + count
    found = []
    a = SiteAccelerators
    for row in await session.scalars(select(a).order_by(a.site_id, a.model)):
        want = int(held.pop((row.site_id, row.model), 0))
        where = f"site {row.site_id!r} {row.model}"
        found.append(Usage(where, row.used, want, row.cap, row.external))
    for (site, model), count in sorted(held.items()):
        if count:
            found.append(Usage(f"site {site!r} {model} (no pool)", 0, int(count), 0))
    return found


async def _link_usages(session: AsyncSession) -> list[Usage]:
    r, rl = ReservationRecord, ReservationLink
    rows = await session.execute(
        select(rl.link_id, func.sum(r.mbps))
        .join(r, r.id == rl.reservation_id)
        .where(r.state == ReservationState.HELD)
        .group_by(rl.link_id)
    )
    held = dict(rows.all())
    p, pl = PeerReservation, PeerReservationLink
    for link, mbps in await session.execute(
        select(pl.link_id, func.sum(p.mbps))
        .join(p, p.id == pl.reservation_id)
        .where(p.state.in_(_HOLDING))
        .group_by(pl.link_id)
    ):
        held[link] = held.get(link, 0) + mbps
    found = []
    for row in await session.scalars(select(LinkCapacity).order_by(LinkCapacity.link_id)):
        want = int(held.pop(row.link_id, 0))
        where = f"link {row.link_id!r} bandwidth"
        found.append(Usage(where, row.mbps_used, want, row.mbps_cap, row.mbps_external))
    for link, mbps in sorted(held.items()):
        if mbps:
            found.append(Usage(f"link {link!r} bandwidth (no capacity row)", 0, int(mbps), 0))
    return found


def _per_tenant(
    table: type[ReservationRecord] | type[PeerReservation], *condition: Any
) -> Select[str, int, int, int, int, int]:
    """Per tenant, the sums of cpu, memory, accelerators and bandwidth and the count of the
    rows of `table` (reservations or peer parts) that meet `condition`."""
    return (
        select(
            table.tenant_id,
            func.sum(table.cpu_m),
            func.sum(table.mem_mib),
            func.sum(table.accelerator_milli),
            func.sum(table.mbps),
            func.count(),
        )
        .where(*condition)
        .group_by(table.tenant_id)
    )


_QUOTA_NAMES = ("cpu", "memory", "accelerators", "bandwidth", "active requests")


async def _quota_usages(session: AsyncSession) -> list[Usage]:
    r = ReservationRecord
    held = {
        tenant: (cpu, mem, acc, mbps, count)
        for tenant, cpu, mem, acc, mbps, count in await session.execute(
            _per_tenant(r, r.state == ReservationState.HELD)
        )
    }
    p = PeerReservation
    for tenant, cpu, mem, acc, mbps, count in await session.execute(
        _per_tenant(p, p.state.in_(_HOLDING), p.counts_quota.is_(True))
    ):
        b = held.get(tenant, (0, 0, 0, 0, 0))
        held[tenant] = (b[0] + cpu, b[1] + mem, b[2] + acc, b[3] + mbps, b[4] + count)
    found = []
    for row in await session.scalars(select(Quota).order_by(Quota.tenant_id)):
        expected = held.pop(row.tenant_id, (0, 0, 0, 0, 0))
        for name, used, limit, want in zip(
            _QUOTA_NAMES,
            (
                row.used_cpu_m,
                row.used_mem_mib,
                row.used_acc_milli,
                row.used_mbps,
                row.active_requests,
            ),
            (
                row.limit_cpu_m,
                row.limit_mem_mib,
                row.limit_acc_milli,
                row.limit_mbps,
                row.limit_active_requests,
            ),
            expected,
            strict=True,
        ):
            found.append(Usage(f"tenant {row.tenant_id!r} {name}", used, int(want), limit))
    for tenant, amounts in sorted(held.items()):
        for name, want in zip(_QUOTA_NAMES, amounts, strict=True):
            found.append(Usage(f"tenant {tenant!r} {name} (no quota row)", 0, int(want), 0))
    return found


def _expect(usage: Usage, require_fit: bool) -> None:
    where, used, want = usage.where, usage.used, usage.held
    if used != want:
        raise AssertionError(f"{where}: used {used} but held reservations sum to {want}")
    if used < 0:
        raise AssertionError(f"{where}: used is negative ({used})")
    if require_fit and usage.cap is not None and used + usage.external > usage.cap:
        raise AssertionError(
            f"{where}: used {used} + external {usage.external} exceeds cap {usage.cap}"
        )
