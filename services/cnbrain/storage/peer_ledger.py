"""This brain's parts of reservations that span brains: prepare, commit, release, expire.

Contract:

- `prepare` takes a part (compute on one of this brain's sites and/or bandwidth on its links,
  and the tenant's quota when the part counts it) with `ledger_store.take_many`, the checks
  and lock order of local reservations, so prepared parts, local reservations and replicas never
  oversubscribe anything. The part is `prepared` until `expires_at`. It holds over its
  claim's window [start_at, end_at) (`ledger_store.calendar_of` reads it); its amounts, as
  for a local reservation, stay taken until it is released, which frees the rest of its
  window at once. A part on a site ends its request's room hold here (`room_holds`), in the
  transaction that prepares it, and cannot take the room held for other requests.
- A part may hold flows (`FlowHold`) besides, each on this brain's links over its own window,
  checked, stored and counted as a local reservation's flows are (`ledger_store`: the
  calendar, the snapshot's peak, `held_flows`). Only the flows of a part that holds count:
  releasing or expiring a part deletes its flows in the same transaction, but its delivery
  when a release asks to keep it (the job completed: its results still move).
- `commit` makes a prepared, unexpired part `held` and records the decision. `release` gives
  back what a prepared or held part took, exactly once. `expire` releases every prepared
  part whose time has passed.
- Every call is idempotent by reservation id: a repeated prepare or commit that succeeded
  succeeds again without taking anything twice (flows included); a repeated release answers
  False.
- `prepare_many`, `commit_many` and `release_many` do the same for many parts in the caller's
  one transaction, each part on its own: a part that cannot be prepared (each runs in a
  savepoint) or committed leaves the others as they are. Each runs a fixed number of
  statements whatever the number of parts (`commit` and `release` are these for one part).
- Nothing here commits: the caller owns the transaction and rolls back after an exception.
"""

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, case, insert, literal, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import (
    HOLDING,
    RELEASED_AFTER_PLACED,
    RequestState,
    ReservationState,
)
from cnbrain.ledger.claim import Claim, FlowHold
from cnbrain.storage import ledger_store
from cnbrain.storage.clock import epoch_s, utcnow
from cnbrain.storage.errors import CapacityConflict, LedgerStoreError, QuotaExceeded
from cnbrain.storage.ledger_sql import amount_columns, link_rows
from cnbrain.storage.models import (
    PeerReservation,
    PeerReservationLink,
    PlacementRequestRecord,
)


async def prepare(
    session: AsyncSession,
    *,
    claim: Claim,
    expires_at: datetime,
    flows: Sequence[FlowHold] = (),
) -> bool:
    """Take `claim`, with its `flows`, as a prepared part that lapses at `expires_at`; True
    when this call took it, False when a part prepared or held under the same id was left as
    it is. Raises CapacityConflict or QuotaExceeded (something is short), or
    LedgerStoreError (the id was released, or names other amounts, another window or other
    flows; a malformed claim or flow; a flow of another reservation).
    """
    earlier = await session.get(PeerReservation, claim.reservation_id, populate_existing=True)
    if earlier is not None:
        now = epoch_s(utcnow())
        held = await ledger_store.flows_of(session, reservation_ids=[earlier.id], now=now)
        _check_same(earlier, claim, flows, held.get(earlier.id, ()), now)
        return False
    await ledger_store.take_many(session, claims=[claim], flows=flows)
    await _insert(session, [claim], expires_at)
    return True


Take = Callable[[AsyncSession, Sequence[Claim], Sequence[FlowHold]], Awaitable[None]]
"""How a brain takes the amounts of parts and holds their flows (each of one of the parts) in
the caller's transaction: `take_many`'s checks (the default), or more of its own (a regional
brain holds the parts that count against quota to its cohorts' quotas too), raising as
`take_many` does when it refuses."""


async def _take(session: AsyncSession, claims: Sequence[Claim], flows: Sequence[FlowHold]) -> None:
    await ledger_store.take_many(session, claims=claims, flows=flows)


async def prepare_many(
    session: AsyncSession,
    *,
    claims: Sequence[Claim],
    expires_at: datetime,
    take: Take = _take,
    flows: Sequence[FlowHold] = (),
) -> list[bool | str]:
    """`prepare` of every claim, in order, each on its own within the caller's transaction,
    with the flows of `flows` that are its (by reservation id); for each: True (this call
    took it), False (prepared or held before under the same id, or earlier in `claims` with
    the same amounts and window), or why it was refused (something short, its flows among
    them; the id released or used with other amounts, another window or other flows). A
    refused part's flows are not stored. Raises LedgerStoreError, before anything is done,
    for a flow of no claim of `claims`. Other errors (the database's) propagate and leave
    the caller to roll back everything.

    The amounts and flows of all fresh claims are first taken together (`take`; by default
    `ledger_store.take_many`: the sums per row, a fixed number of statements) in one
    savepoint; only when that is refused is it undone and each claim taken with its flows
    in a savepoint of its own. The parts are then stored with one insert per table (the
    flows by `take`); the flows of the parts prepared before are read with two statements,
    when there are such parts."""
    flows_of: dict[str, list[FlowHold]] = {}
    for flow in flows:
        flows_of.setdefault(flow.reservation_id, []).append(flow)
    strays = sorted(set(flows_of) - {claim.reservation_id for claim in claims})
    if strays:
        raise LedgerStoreError(f"flows of reservation {strays[0]!r}, not among the claims")
    results: list[bool | str | None] = [None] * len(claims)
    ids = sorted({claim.reservation_id for claim in claims})
    earlier = {
        row.id: row
        for row in await session.scalars(
            select(PeerReservation)
            .where(PeerReservation.id.in_(ids))
            .execution_options(populate_existing=True)
        )
    }
    now = epoch_s(utcnow())
    held = await ledger_store.flows_of(session, reservation_ids=sorted(earlier), now=now)
    fresh: dict[str, int] = {}
    for i, claim in enumerate(claims):
        rid = claim.reservation_id
        try:
            if rid in earlier:
                _check_same(earlier[rid], claim, flows_of.get(rid, ()), held.get(rid, ()), now)
                results[i] = False
            elif claim.reservation_id in fresh:
                if claims[fresh[claim.reservation_id]] != claim:
                    raise LedgerStoreError(
                        f"reservation {claim.reservation_id!r} was prepared with other amounts"
                        " or another window"
                    )
                results[i] = False
            else:
                fresh[claim.reservation_id] = i
        except LedgerStoreError as refused:
            results[i] = str(refused)
    order = sorted(fresh.values())

    def flows_of_claims(positions: Sequence[int]) -> list[FlowHold]:
        return [flow for i in positions for flow in flows_of.get(claims[i].reservation_id, ())]

    try:
        async with session.begin_nested():
            await take(session, [claims[i] for i in order], flows_of_claims(order))
        for i in order:
            results[i] = True
    except (CapacityConflict, QuotaExceeded, LedgerStoreError):
        for i in order:
            try:
                async with session.begin_nested():
                    await take(session, [claims[i]], flows_of_claims([i]))
                results[i] = True
            except (CapacityConflict, QuotaExceeded, LedgerStoreError) as refused:
                results[i] = str(refused)
    await _insert(session, [claims[i] for i in order if results[i] is True], expires_at)
    assert all(result is not None for result in results)
    return [result for result in results if result is not None]


async def _insert(session: AsyncSession, claims: Sequence[Claim], expires_at: datetime) -> None:
    """Store `claims` as prepared parts lapsing at `expires_at`: one insert per table."""
    if not claims:
        return
    now = utcnow()
    await session.execute(
        insert(PeerReservation),
        [
            {
                "id": claim.reservation_id,
                **amount_columns(claim),
                "counts_quota": claim.counts_quota,
                "state": ReservationState.PREPARED,
                "expires_at": expires_at,
                "created_at": now,
            }
            for claim in claims
        ],
    )
    links = link_rows(claims)
    if links:
        await session.execute(insert(PeerReservationLink), links)


async def commit_many(
    session: AsyncSession,
    *,
    entries: Sequence[tuple[str, dict[str, Any] | None, dict[str, Any] | None]],
    now: datetime | None = None,
) -> list[str | None]:
    """`commit` of every (reservation id, decision, request), in order; for each, None
    (held: by this call, before, or earlier in `entries`, whose decision and request are the
    ones recorded) or why it cannot be committed. One UPDATE for all of them (the rows locked
    in id order), and one SELECT of the states of those it did not make held."""
    now = now or utcnow()
    if not entries:
        return []
    first: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {}
    for rid, decision, request in entries:
        first.setdefault(rid, (decision, request))
    p = PeerReservation
    ids = sorted(first)
    decision_type, request_type = p.__table__.c.decision.type, p.__table__.c.request.type
    committed = set(
        await session.scalars(
            update(p)
            .where(
                p.id.in_(_locked_ids(ids)),
                p.state == ReservationState.PREPARED,
                p.expires_at > now,
            )
            .values(
                state=ReservationState.HELD,
                expires_at=None,
                decision=case(
                    {rid: literal(d, decision_type) for rid, (d, _) in first.items()}, value=p.id
                ),
                request=case(
                    {rid: literal(r, request_type) for rid, (_, r) in first.items()}, value=p.id
                ),
            )
            .returning(p.id)
            .execution_options(synchronize_session=False)
        )
    )
    rest = [rid for rid in ids if rid not in committed]
    states: dict[str, str] = {}
    if rest:
        rows = await session.execute(select(p.id, p.state).where(p.id.in_(rest)))
        states = {row.id: row.state for row in rows}
    return [
        None if rid in committed else _not_committed(rid, states.get(rid)) for rid, _, _ in entries
    ]


def _not_committed(reservation_id: str, state: str | None) -> str | None:
    """Why a part in `state` (None: no such part) was not made held; None when it is held."""
    if state == ReservationState.HELD:
        return None
    if state is None:
        return f"reservation {reservation_id!r} was never prepared here"
    if state == ReservationState.PREPARED:
        return f"reservation {reservation_id!r} expired before its commit"
    return f"reservation {reservation_id!r} was released before its commit"


async def release_many(
    session: AsyncSession, *, reservation_ids: Sequence[str], keep_delivery: bool = False
) -> list[bool]:
    """`release` of every reservation id, in order; for each, whether this call released it
    (an id repeated in `reservation_ids` is released by its first entry only). One UPDATE
    marks every prepared or held part released (the rows locked in id order) and returns its
    amounts, one SELECT reads their links, `ledger_store.give_back_many` gives the sums
    back with one UPDATE per capacity table, and `ledger_store.drop_flows` deletes their
    flows (but the deliveries with `keep_delivery`) with two statements."""
    ids = sorted(set(reservation_ids))
    if not ids:
        return []
    p = PeerReservation
    live = sorted(HOLDING)
    rows = (
        await session.execute(
            update(p)
            .where(p.id.in_(_locked_ids(ids, live)), p.state.in_(live))
            .values(state=ReservationState.RELEASED, released_at=utcnow(), expires_at=None)
            .returning(
                p.id,
                p.request_id,
                p.tenant_id,
                p.site_id,
                p.cpu_m,
                p.mem_mib,
                p.storage_gib,
                p.accelerator_model,
                p.accelerator_milli,
                p.mbps,
                p.start_at,
                p.end_at,
                p.counts_quota,
            )
            .execution_options(synchronize_session=False)
        )
    ).all()
    released = {row.id: row for row in rows}
    links: dict[str, list[str]] = {rid: [] for rid in released}
    if released:
        found = await session.execute(
            select(PeerReservationLink.reservation_id, PeerReservationLink.link_id)
            .where(PeerReservationLink.reservation_id.in_(sorted(released)))
            .order_by(PeerReservationLink.reservation_id, PeerReservationLink.link_id)
        )
        for rid, link in found:
            links[rid].append(link)
    await ledger_store.give_back_many(
        session,
        claims=[
            ledger_store.claim_of_row(row, link_ids=links[rid])
            for rid, row in sorted(released.items())
        ],
    )
    if released:
        await ledger_store.drop_flows(
            session, reservation_ids=sorted(released), keep_delivery=keep_delivery
        )
    seen: set[str] = set()
    answers = []
    for rid in reservation_ids:
        answers.append(rid in released and rid not in seen)
        seen.add(rid)
    return answers


def _locked_ids(ids: Sequence[str], states: Sequence[str] | None = None) -> Select[str]:
    """The ids of the parts of `ids` (in `states`, when given), locked in id order: the rows
    an UPDATE over many parts changes, so that two such updates never wait on each other in
    opposite orders."""
    p = PeerReservation
    where = [p.id.in_(list(ids))]
    if states is not None:
        where.append(p.state.in_(list(states)))
    return select(p.id).where(*where).order_by(p.id).with_for_update()


async def commit(
    session: AsyncSession,
    *,
    reservation_id: str,
    decision: dict[str, Any] | None,
    request: dict[str, Any] | None,
    now: datetime | None = None,
) -> str | None:
    """Make a prepared, unexpired part held and record `decision` and `request`. Returns
    None when the part is (now, or already) held; otherwise why it cannot be committed."""
    entries = [(reservation_id, decision, request)]
    return (await commit_many(session, entries=entries, now=now))[0]


async def release(
    session: AsyncSession, *, reservation_id: str, keep_delivery: bool = False
) -> bool:
    """Give back what the part took, its flows included (but its delivery with
    `keep_delivery`), and mark it released; False when there was nothing (unknown, or
    released already)."""
    released = await release_many(
        session, reservation_ids=[reservation_id], keep_delivery=keep_delivery
    )
    return released[0]


async def expire(session: AsyncSession, *, now: datetime | None = None) -> list[str]:
    """Release every prepared part whose `expires_at` has passed, and delete its flows;
    their ids."""
    now = now or utcnow()
    p = PeerReservation
    lapsed = list(
        await session.scalars(
            select(p.id)
            .where(p.state == ReservationState.PREPARED, p.expires_at <= now)
            .order_by(p.id)
        )
    )
    released = await release_many(session, reservation_ids=lapsed)
    return [rid for rid, done in zip(lapsed, released, strict=True) if done]


async def get(session: AsyncSession, *, reservation_id: str) -> PeerReservation | None:
    return await session.get(PeerReservation, reservation_id, populate_existing=True)


async def parts_of_request(session: AsyncSession, *, request_id: str) -> list[PeerReservation]:
    """Every part recorded for `request_id`, oldest first."""
    rows = await session.scalars(
        select(PeerReservation)
        .where(PeerReservation.request_id == request_id)
        .order_by(PeerReservation.created_at, PeerReservation.id)
    )
    return list(rows)


async def held_decisions(
    session: AsyncSession, *, request_ids: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """The recorded decision of every request of `request_ids` that has a held part with one
    (one query for all of them)."""
    if not request_ids:
        return {}
    p = PeerReservation
    rows = await session.execute(
        select(p.request_id, p.decision)
        .where(p.request_id.in_(list(request_ids)), p.state == ReservationState.HELD)
        .order_by(p.created_at, p.id)
    )
    found: dict[str, dict[str, Any]] = {}
    for request_id, decision in rows:
        if decision is not None:
            found.setdefault(request_id, decision)
    return found


async def active_parts(session: AsyncSession) -> list[PeerReservation]:
    """Parts that hold something (prepared or held), oldest first."""
    rows = await session.scalars(
        select(PeerReservation)
        .where(PeerReservation.state.in_(sorted(HOLDING)))
        .order_by(PeerReservation.created_at, PeerReservation.id)
    )
    return list(rows)


async def unreleased_parts_of_ended_requests(
    session: AsyncSession, *, request_ids: Sequence[str] | None = None
) -> list[tuple[str, bool]]:
    """The ids of the parts not released yet of this brain's requests that have ended
    (completed, failed or cancelled), or only of `request_ids`, oldest first, each with
    whether its request completed."""
    p, r = PeerReservation, PlacementRequestRecord
    query = (
        select(p.id, r.state == RequestState.COMPLETED)
        .join(r, r.id == p.request_id)
        .where(p.state != ReservationState.RELEASED, r.state.in_(sorted(RELEASED_AFTER_PLACED)))
    )
    if request_ids is not None:
        query = query.where(p.request_id.in_(list(request_ids)))
    found = await session.execute(query.order_by(p.created_at, p.id))
    return [(part_id, bool(completed)) for part_id, completed in found.all()]


def _check_same(
    earlier: PeerReservation,
    claim: Claim,
    flows: Sequence[FlowHold],
    held: Sequence[FlowHold],
    now: int,
) -> None:
    """LedgerStoreError unless `claim` with `flows` asks what the unreleased part `earlier`,
    holding `held`, took: the flows that have not ended by epoch second `now` compared."""
    if earlier.state == ReservationState.RELEASED:
        raise LedgerStoreError(f"reservation {claim.reservation_id!r} was released already")
    same = (
        earlier.site_id == claim.site_id
        and earlier.cpu_m == claim.cpu_m
        and earlier.mem_mib == claim.mem_mib
        and earlier.storage_gib == claim.storage_gib
        and earlier.accelerator_milli == claim.accelerator_milli
        and earlier.mbps == claim.mbps
        and earlier.counts_quota == claim.counts_quota
        and (epoch_s(earlier.start_at), epoch_s(earlier.end_at))
        == (claim.window.start, claim.window.end)
    )
    if not same:
        raise LedgerStoreError(
            f"reservation {claim.reservation_id!r} was prepared with other amounts"
            " or another window"
        )
    if _unended(flows, now) != _unended(held, now):
        raise LedgerStoreError(
            f"reservation {claim.reservation_id!r} was prepared with other flows"
        )


def _unended(flows: Sequence[FlowHold], now: int) -> list[tuple[object, ...]]:
    """The flows of `flows` whose window ends after `now`, in a form to compare."""
    return sorted(
        (f.kind, f.peer, f.link_ids, f.mbps, f.window.start, f.window.end)
        for f in flows
        if f.window.end > now
    )
