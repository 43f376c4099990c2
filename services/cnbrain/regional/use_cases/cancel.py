"""Cancelling a placed request: its reservations released in every owner, its job
cancelled on its scheduler."""

from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.errors import Conflict, NotFound, Unavailable
from cnbrain.domain.events import RequestEvent, RequestEventKind
from cnbrain.domain.states import CANCELLABLE, RUNNABLE, RequestState, ReservationState
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.steered_paths import Steered
from cnbrain.regional.schemas import RequestView
from cnbrain.regional.security import Principal
from cnbrain.regional.unit_of_work import CapacityChanges
from cnbrain.regional.use_cases.ports import NationalClient
from cnbrain.regional.use_cases.read import ReadRequests
from cnbrain.storage import audit, ledger_store, peer_ledger, request_events, requests


class CancelRequest:
    """`peer_changed()` tells the brain that its part of a cross-region reservation was
    released here; `wake_jobs()` starts the dispatcher's next round now; `steered` (when the
    brain steers) removes the released reservations' paths from the data plane."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        changes: CapacityChanges,
        national: NationalClient | None,
        read: ReadRequests,
        peer_changed: Callable[[], None],
        wake_jobs: Callable[[], None],
        steered: Steered | None = None,
    ) -> None:
        self._steered = steered
        self._sessions = sessions
        self._changes = changes
        self._national = national
        self._read = read
        self._peer_changed = peer_changed
        self._wake_jobs = wake_jobs

    async def __call__(self, principal: Principal, request_id: str) -> RequestView:
        """Cancel the request and return it as it now stands. Raises NotFound, Conflict (it
        is pending, or ended) or Unavailable (the national brain could not release its parts)."""
        await self._release_elsewhere(principal, request_id)
        await self._release(principal, request_id)
        self._wake_jobs()  # the dispatcher cancels the request's job on its scheduler
        return await self._read.one(principal, request_id)

    async def _release_elsewhere(self, principal: Principal, request_id: str) -> None:
        """Release the cross-region reservation of a request placed by the national brain,
        in every owner; 503 when the national brain cannot be reached (nothing changes)."""
        national = self._national
        if national is None:
            return
        async with self._sessions() as session:
            record = await requests.get_request(
                session, tenant_id=principal.tenant_scope(), request_id=request_id
            )
            if record is None or record.state not in RUNNABLE:
                return
            parts = await peer_ledger.parts_of_request(session, request_id=request_id)
        for part in parts:
            if part.state == ReservationState.RELEASED:
                continue
            try:
                await national.release(part.id, "cancelled by the tenant")
            except PeerUnavailable as error:
                raise Unavailable(
                    f"the national brain could not release reservation {part.id!r} "
                    f"({error.cause}); try again"
                ) from None
            # The national brain has released this brain's part through its LedgerService,
            # unless it no longer knew the reservation; then the part is released here.
            async with self._sessions.begin() as session:
                released_here = await peer_ledger.release(session, reservation_id=part.id)
            if released_here:
                self._peer_changed()

    async def _release(self, principal: Principal, request_id: str) -> None:
        async with self._changes.begin() as (session, change):
            record = await requests.get_request(
                session, tenant_id=principal.tenant_scope(), request_id=request_id, for_update=True
            )
            if record is None:
                raise NotFound(f"request {request_id!r} does not exist")
            if record.state == RequestState.PENDING:
                raise Conflict(
                    f"request {request_id!r} is pending: it is being decided now; "
                    "cancel it once it is placed"
                )
            if record.state not in CANCELLABLE:
                raise Conflict(
                    f"request {request_id!r} is {record.state}; only requests queued, or placed "
                    "and whose job has not ended, can be cancelled"
                )
            released = await ledger_store.held_reservations(session, request_id=request_id)
            for reservation_id in released:
                await ledger_store.release(session, reservation_id=reservation_id)
            change.free()
            at = await requests.set_states(
                session,
                [
                    requests.StateChange(
                        request_id, RequestState.CANCELLED, reason="cancelled by the tenant"
                    )
                ],
            )
            await request_events.append_many(
                session,
                [RequestEvent.of(request_id, RequestEventKind.CANCELLED, at, by=principal.user_id)],
            )
            await audit.record(
                session,
                actor=principal.user_id,
                tenant_id=record.tenant_id,
                action="request.cancelled",
                object_type="request",
                object_id=request_id,
            )
        if self._steered is not None:
            await self._steered.release(released)
