"""LedgerService: a brain's own part of cross-brain reservations, over its database.

Each call is one database transaction. A part may only touch this brain's own sites and
links (`Ownership`); anything else is refused with INVALID_ARGUMENT, so no brain ever writes
a ledger it does not own. Prepared parts that are not committed in time are released by
`expire_forever`.
"""

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol

import grpc
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from typing_extensions import override

from cnbrain.federation.codec import claim_of, reservation_of
from cnbrain.federation.ownership import Ownership, link_index
from cnbrain.ledger.reservation import Reservation
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import peer_ledger
from cnbrain.storage.errors import CapacityConflict, LedgerStoreError, QuotaExceeded
from cnbrain.storage.models import utcnow
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


class LedgerServicer(ledger_pb2_grpc.LedgerServiceServicer):
    """`view()` gives the current map arrays and ownership (they change when the map is
    reloaded). A prepare is bracketed by `watch.begin_local_change()` and
    `watch.end_local_change(what it took, or None)`; a release calls `watch.capacity_changed()`.
    """

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
        problem = self._refusal(request)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        claim = claim_of(request)
        expires_at = utcnow() + timedelta(milliseconds=request.ttl_ms)
        arrays, _ = self._view()
        taken: Reservation | None = None
        self._watch.begin_local_change()
        try:
            async with self._sessions.begin() as session:
                fresh = await peer_ledger.prepare(session, claim=claim, expires_at=expires_at)
            if fresh:
                taken = reservation_of(claim, arrays=arrays, links=link_index(arrays))
        except (CapacityConflict, QuotaExceeded, LedgerStoreError) as refused:
            return ledger_pb2.PrepareResponse(prepared=False, reason=str(refused))
        finally:
            self._watch.end_local_change(taken)
        return ledger_pb2.PrepareResponse(prepared=True)

    @override
    async def Commit(
        self, request: ledger_pb2.CommitRequest, context: Context
    ) -> ledger_pb2.CommitResponse:
        try:
            decision = json.loads(request.decision_json) if request.decision_json else None
            placed = json.loads(request.request_json) if request.request_json else None
        except json.JSONDecodeError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not JSON: {exc}")
        async with self._sessions.begin() as session:
            reason = await peer_ledger.commit(
                session, reservation_id=request.reservation_id, decision=decision, request=placed
            )
        return ledger_pb2.CommitResponse(committed=reason is None, reason=reason or "")

    @override
    async def Release(
        self, request: ledger_pb2.ReleaseRequest, context: Context
    ) -> ledger_pb2.ReleaseResponse:
        async with self._sessions.begin() as session:
            released = await peer_ledger.release(session, reservation_id=request.reservation_id)
        if released:
            self._watch.capacity_changed()
        return ledger_pb2.ReleaseResponse(released=released)

    def _refusal(self, request: ledger_pb2.PrepareRequest) -> str | None:
        if not request.reservation_id or not request.request_id:
            return "reservation_id and request_id are required"
        if not MIN_TTL_MS <= request.ttl_ms <= MAX_TTL_MS:
            return f"ttl_ms must be within {MIN_TTL_MS}..{MAX_TTL_MS}, not {request.ttl_ms}"
        arrays, ownership = self._view()
        site_id = request.compute.site_id
        if site_id:
            index = arrays.map.site_index.get(site_id)
            if index is None or not ownership.sites[index]:
                return f"site {site_id!r} is not owned by {ownership.owner}"
        links = link_index(arrays)
        for link_id in request.link_ids:
            j = links.get(link_id)
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
