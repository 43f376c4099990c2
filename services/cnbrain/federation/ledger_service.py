"""LedgerService: a brain's own part of cross-brain reservations, over its database.

Each call is one database transaction for all the parts it carries. A part may only touch this
brain's own sites and links (`Ownership`); anything else is refused (that part, with the
reason), so no brain ever writes a ledger it does not own. Prepared parts that are not
committed in time are released by `expire_forever`.
"""

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

import grpc
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from typing_extensions import override

from cnbrain.federation.codec import claim_of
from cnbrain.federation.ownership import Ownership
from cnbrain.ledger.claim import Claim, reservation_of
from cnbrain.ledger.reservation import Reservation
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import peer_ledger
from cnbrain.storage.clock import utcnow
from cnbrain.v1 import ledger_pb2, ledger_pb2_grpc

log = logging.getLogger("cnbrain.federation")

Context = grpc.aio.ServicerContext[Any, Any]

MIN_TTL_MS = 100
MAX_TTL_MS = 600_000


class CapacityWatch(Protocol):
    """How a brain keeps its cached snapshot current around its own ledger changes."""

    def begin_local_change(self) -> None: ...

    def end_local_change(self, reservation: Reservation | None) -> None: ...

    def capacity_changed(self) -> None: ...


@dataclass(slots=True, eq=False)
class LocalChange:
    """What one change of a brain's own ledger did: the reservations it took, and whether it
    freed capacity (released or moved a reservation)."""

    taken: list[Reservation] = field(default_factory=list)
    freed: bool = False

    def took(self, reservation: Reservation) -> None:
        self.taken.append(reservation)

    def free(self) -> None:
        self.freed = True

    @property
    def changed(self) -> bool:
        return self.freed or bool(self.taken)


@asynccontextmanager
async def local_change(watch: CapacityWatch) -> AsyncIterator[LocalChange]:
    """Bracket a change of the brain's own ledger for its cached snapshot. Reads that overlap
    the block are not cached. When the block ends normally, the cached snapshot takes what it
    `took`, or is forgotten when it freed capacity; when it raises, the cached snapshot is
    forgotten (the change may or may not have been committed)."""
    change = LocalChange()
    watch.begin_local_change()
    try:
        yield change
    except BaseException:
        watch.end_local_change(None)
        watch.capacity_changed()
        raise
    if change.freed or not change.taken:
        watch.end_local_change(None)
        if change.freed:
            watch.capacity_changed()
        return
    for reservation in change.taken:
        watch.end_local_change(reservation)


async def prepare_parts(
    sessions: async_sessionmaker[AsyncSession],
    claims: Sequence[Claim],
    *,
    ttl_ms: int,
    arrays: MapArrays,
    watch: CapacityWatch,
) -> list[str | None]:
    """Prepare every claim in one transaction (each on its own, see `peer_ledger.prepare_many`);
    for each, None (prepared, now or before) or why not. The cached snapshot takes what was
    taken. Should the transaction fail in the database (say, a deadlock with a concurrent
    one), every claim is tried again in a transaction of its own."""
    if not claims:
        return []
    expires_at = utcnow() + timedelta(milliseconds=ttl_ms)
    async with local_change(watch) as change:
        try:
            async with sessions.begin() as session:
                outcomes = await peer_ledger.prepare_many(
                    session, claims=claims, expires_at=expires_at
                )
        except DBAPIError:
            if len(claims) == 1:
                raise
            log.warning("preparing %d parts together failed; one at a time", len(claims))
            outcomes = []
            for claim in claims:
                async with sessions.begin() as session:
                    outcomes.extend(
                        await peer_ledger.prepare_many(
                            session, claims=[claim], expires_at=expires_at
                        )
                    )
        for claim, outcome in zip(claims, outcomes, strict=True):
            if outcome is True:
                change.took(reservation_of(claim, arrays=arrays))
    return [outcome if isinstance(outcome, str) else None for outcome in outcomes]


async def commit_parts(
    sessions: async_sessionmaker[AsyncSession],
    entries: Sequence[tuple[str, dict[str, Any] | None, dict[str, Any] | None]],
) -> list[str | None]:
    """Commit every (reservation id, decision, request) in one transaction; for each, None
    (held) or why it cannot be committed."""
    if not entries:
        return []
    async with sessions.begin() as session:
        return await peer_ledger.commit_many(session, entries=entries)


async def release_parts(
    sessions: async_sessionmaker[AsyncSession],
    reservation_ids: Sequence[str],
    *,
    watch: CapacityWatch,
) -> list[bool]:
    """Release every reservation id in one transaction; for each, whether this call did. The
    cached snapshot is bracketed as for a prepare, and forgotten when anything was released."""
    if not reservation_ids:
        return []
    async with local_change(watch) as change:
        async with sessions.begin() as session:
            released = await peer_ledger.release_many(session, reservation_ids=reservation_ids)
        if any(released):
            change.free()
    return released


class LedgerServicer(ledger_pb2_grpc.LedgerServiceServicer):
    """`view()` gives the current map arrays and ownership (they change when the map is
    reloaded). Every call is one database transaction for all its parts (`prepare_parts`,
    `commit_parts`, `release_parts`); a part that names something this brain does not own,
    or lacks its ids, is refused on its own."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        view: Callable[[], tuple[MapArrays, Ownership]],
        watch: CapacityWatch,
    ) -> None:
        self._sessions = sessions
        self._view = view
        self._watch = watch

    @override
    async def Prepare(
        self, request: ledger_pb2.PrepareRequest, context: Context
    ) -> ledger_pb2.PrepareResponse:
        if not MIN_TTL_MS <= request.ttl_ms <= MAX_TTL_MS:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"ttl_ms must be within {MIN_TTL_MS}..{MAX_TTL_MS}, not {request.ttl_ms}",
            )
        arrays, ownership = self._view()
        reasons: list[str | None] = [_refusal(part, arrays, ownership) for part in request.parts]
        valid = [
            claim_of(part)
            for part, reason in zip(request.parts, reasons, strict=True)
            if reason is None
        ]
        outcomes = iter(
            await prepare_parts(
                self._sessions, valid, ttl_ms=request.ttl_ms, arrays=arrays, watch=self._watch
            )
        )
        reasons = [next(outcomes) if reason is None else reason for reason in reasons]
        return ledger_pb2.PrepareResponse(
            results=[
                ledger_pb2.PrepareResult(
                    reservation_id=part.reservation_id, prepared=reason is None, reason=reason or ""
                )
                for part, reason in zip(request.parts, reasons, strict=True)
            ]
        )

    @override
    async def Commit(
        self, request: ledger_pb2.CommitRequest, context: Context
    ) -> ledger_pb2.CommitResponse:
        reasons: list[str | None] = []
        valid: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = []
        for entry in request.entries:
            try:
                decision = json.loads(entry.decision_json) if entry.decision_json else None
                placed = json.loads(entry.request_json) if entry.request_json else None
            except json.JSONDecodeError as exc:
                reasons.append(f"not JSON: {exc}")
                continue
            reasons.append(None)
            valid.append((entry.reservation_id, decision, placed))
        outcomes = iter(await commit_parts(self._sessions, valid))
        reasons = [next(outcomes) if reason is None else reason for reason in reasons]
        return ledger_pb2.CommitResponse(
            results=[
                ledger_pb2.CommitResult(
                    reservation_id=entry.reservation_id,
                    committed=reason is None,
                    reason=reason or "",
                )
                for entry, reason in zip(request.entries, reasons, strict=True)
            ]
        )

    @override
    async def Release(
        self, request: ledger_pb2.ReleaseRequest, context: Context
    ) -> ledger_pb2.ReleaseResponse:
        released = await release_parts(
            self._sessions, list(request.reservation_ids), watch=self._watch
        )
        return ledger_pb2.ReleaseResponse(released=released)


def _refusal(part: ledger_pb2.PartClaim, arrays: MapArrays, ownership: Ownership) -> str | None:
    """Why `part` cannot be taken here whatever the ledger holds, or None."""
    if not part.reservation_id or not part.request_id:
        return "reservation_id and request_id are required"
    site_id = part.compute.site_id
    if site_id:
        index = arrays.map.site_index.get(site_id)
        if index is None or not ownership.sites[index]:
            return f"site {site_id!r} is not owned by {ownership.owner}"
    for link_id in part.link_ids:
        j = arrays.link_index.get(link_id)
        if j is None or not ownership.owns_link(j):
            return f"link {link_id!r} is not owned by {ownership.owner}"
    return None


async def expire_forever(
    sessions: async_sessionmaker[AsyncSession],
    *,
    changed: Callable[[], None],
    interval_s: float = 1.0,
) -> None:
    """Release lapsed prepared parts every `interval_s`, until cancelled."""
    while True:
        try:
            async with sessions.begin() as session:
                lapsed = await peer_ledger.expire(session)
            if lapsed:
                log.warning(
                    "released %d prepared reservations that were never committed: %s",
                    len(lapsed),
                    ", ".join(lapsed),
                )
                changed()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("expiring prepared reservations failed; trying again")
        await asyncio.sleep(interval_s)
