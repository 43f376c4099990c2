"""What the ledger auditor reads of a brain's database, and its repairs.

Contract:

- `read` reads, in the caller's transaction, every `used` column with what its holdings sum
  to (`ledger_store.usages`), the held reservations with their requests' states, and the
  prepared or held parts of cross-brain reservations with the source province of their
  recorded request, in one consistent view: it is the first statement of a fresh
  transaction, which it makes REPEATABLE READ on PostgreSQL.
- `live_requests` answers which of some request ids are live in this brain (recorded here
  and not ended: pending, queued or runnable) and which completed.
- `release` releases reservations and parts through the ledger's own release paths
  (`ledger_store.release`, `peer_ledger.release_many`), so the `used` columns stay the sums
  of what is held, and appends an audit-log entry for each one it released, in the caller's
  transaction. A reservation or part whose request completed keeps its deliveries until
  their windows end, as the job's own release keeps them. A reservation or part that is no
  longer held is left as it is.
"""

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import ENDED_REQUEST, HOLDING, RequestState, ReservationState
from cnbrain.ledger.audit import HeldReservation, Liveness, Usage
from cnbrain.storage import audit, ledger_store, peer_ledger
from cnbrain.storage.clock import as_utc
from cnbrain.storage.database import on_postgresql
from cnbrain.storage.errors import LedgerStoreError
from cnbrain.storage.models import PeerReservation, PlacementRequestRecord, ReservationRecord

ACTOR = "ledger-auditor"
"""The actor of the audit-log entries of the auditor's repairs."""

MAX_IDS = 1000
"""Request ids `live_requests` answers in one call, at most."""

_ENDED = sorted(str(state) for state in ENDED_REQUEST)


@dataclass(frozen=True, slots=True)
class PartRow:
    """A prepared or held part, with the source province of its recorded request (None:
    none recorded)."""

    id: str
    request_id: str
    tenant_id: str
    state: str
    created_at: datetime
    expires_at: datetime | None
    source_province: str | None


@dataclass(frozen=True, slots=True)
class LedgerRows:
    usages: list[Usage]
    reservations: list[HeldReservation]
    parts: list[PartRow]


async def read(session: AsyncSession) -> LedgerRows:
    """The rows of one audit (see the module's contract)."""
    if on_postgresql(session):
        await session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    usages = await ledger_store.usages(session)
    r, q = ReservationRecord, PlacementRequestRecord
    reservations = [
        HeldReservation(
            id=rid,
            request_id=request_id,
            request_state=state,
            since_s=as_utc(updated_at).timestamp(),
        )
        for rid, request_id, state, updated_at in await session.execute(
            select(r.id, r.request_id, q.state, q.updated_at)
            .join(q, q.id == r.request_id)
            .where(r.state == ReservationState.HELD)
            .order_by(r.created_at, r.id)
        )
    ]
    p = PeerReservation
    parts = [
        PartRow(
            id=row.id,
            request_id=row.request_id,
            tenant_id=row.tenant_id,
            state=row.state,
            created_at=row.created_at,
            expires_at=row.expires_at,
            source_province=row.province if isinstance(row.province, str) else None,
        )
        for row in await session.execute(
            select(
                p.id,
                p.request_id,
                p.tenant_id,
                p.state,
                p.created_at,
                p.expires_at,
                p.request["source_province"].as_string().label("province"),
            )
            .where(p.state.in_(sorted(HOLDING)))
            .order_by(p.created_at, p.id)
        )
    ]
    return LedgerRows(usages=usages, reservations=reservations, parts=parts)


async def live_requests(session: AsyncSession, *, request_ids: Sequence[str]) -> Liveness:
    """Which of `request_ids` (at most MAX_IDS; LedgerStoreError for more) are recorded here
    and not ended, and which completed."""
    if len(request_ids) > MAX_IDS:
        raise LedgerStoreError(f"at most {MAX_IDS} request ids, not {len(request_ids)}")
    if not request_ids:
        return Liveness()
    q = PlacementRequestRecord
    rows = (
        await session.execute(select(q.id, q.state).where(q.id.in_(sorted(set(request_ids)))))
    ).all()
    return Liveness(
        live=frozenset(rid for rid, state in rows if state not in _ENDED),
        completed=frozenset(rid for rid, state in rows if state == RequestState.COMPLETED),
    )


async def release(
    session: AsyncSession,
    *,
    reservations: Mapping[str, str],
    parts: Mapping[str, str],
    tenants: Mapping[str, str | None],
    keep_deliveries: Collection[str] = frozenset(),
) -> tuple[list[str], list[str]]:
    """Release the held `reservations` and the prepared or held `parts` (each id -> why) and
    record each release (`tenants`: the tenant of a part, when known); the ids of the
    reservations and of the parts this call released. Those of them in `keep_deliveries`
    (their request completed) keep their deliveries until their windows end, as the job's
    own release keeps them. A reservation released by another transaction after this one
    read it raises LedgerStoreError (the caller rolls back and audits again later)."""
    released_reservations = []
    owners = dict(tenants)
    for reservation_id in await _held(session, sorted(reservations)):
        record = await ledger_store.release(
            session, reservation_id=reservation_id, keep_delivery=reservation_id in keep_deliveries
        )
        released_reservations.append(reservation_id)
        owners[reservation_id] = record.tenant_id
    released_parts: list[str] = []
    for keep_delivery in (False, True):
        part_ids = sorted(p for p in parts if (p in keep_deliveries) is keep_delivery)
        done = await peer_ledger.release_many(
            session, reservation_ids=part_ids, keep_delivery=keep_delivery
        )
        released_parts += [rid for rid, ok in zip(part_ids, done, strict=True) if ok]
    await audit.record_many(
        session,
        [
            audit.Entry(
                actor=ACTOR,
                action=action,
                object_type=object_type,
                object_id=rid,
                tenant_id=owners.get(rid),
                detail={"reason": reasons[rid]},
            )
            for action, object_type, ids, reasons in (
                ("reservation.release", "reservation", released_reservations, reservations),
                ("part.release", "peer_reservation", released_parts, parts),
            )
            for rid in ids
        ],
    )
    return released_reservations, released_parts


async def _held(session: AsyncSession, ids: Sequence[str]) -> list[str]:
    """The held ones of reservations `ids`."""
    if not ids:
        return []
    r = ReservationRecord
    rows = await session.scalars(
        select(r.id).where(r.id.in_(list(ids)), r.state == ReservationState.HELD).order_by(r.id)
    )
    return list(rows)
