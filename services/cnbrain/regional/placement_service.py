"""Submitting, quoting and cancelling requests: the engine decides, the database reserves.

A submission is stored as `pending` before anything else, so an accepted request is never
lost. Then, up to `placement_attempts` times: decide on the current snapshot, and take the
decision's reservation in one database transaction with conditional updates. When another
request (of this brain or a replica) took the capacity first, the transaction fails, the
snapshot is refreshed and the request is decided again.
"""

import uuid
from typing import Any

import anyio
import grpc

from cnbrain.domain.decision import Decision, DecisionStatus, SegmentKind
from cnbrain.domain.request import PlacementRequest
from cnbrain.placement.request_check import check_request, parse_request
from cnbrain.regional.brain import Brain
from cnbrain.regional.problems import conflict, forbidden, invalid, not_found, unavailable
from cnbrain.regional.schemas import Quote, RequestPage, RequestView
from cnbrain.regional.security import Principal
from cnbrain.storage import audit, ledger_store, peer_ledger, requests, tenants
from cnbrain.storage.models import PlacementRequestRecord

ACTIVE_STATES = ("placed", "running")


def new_request_id() -> str:
    return f"req-{uuid.uuid4().hex[:16]}"


class PlacementService:
    def __init__(self, brain: Brain) -> None:
        self.brain = brain

    async def submit(
        self, principal: Principal, body: dict[str, Any], *, idempotency_key: str | None
    ) -> tuple[RequestView, bool]:
        """Store, decide and reserve. Returns the request and whether it is new (False when
        the idempotency key names an earlier submission, which is returned unchanged)."""
        tenant = await self._tenant_of(principal, body)
        request = parse_request({**body, "id": new_request_id(), "tenant": tenant})
        check_request(request, self.brain.placement.map)
        caches = self.brain.caches
        if idempotency_key:
            earlier = await caches.idempotency.claim(
                tenant_id=tenant, key=idempotency_key, ttl_s=self.brain.settings.idempotency_ttl_s
            )
            if earlier is not None and earlier != "pending":
                return await self.view(principal, earlier), False
        try:
            async with self.brain.sessions.begin() as session:
                await requests.insert_request(
                    session,
                    request_id=request.id,
                    tenant_id=tenant,
                    user_id=principal.user_id,
                    idempotency_key=idempotency_key,
                    body=request.model_dump(mode="json"),
                )
                await audit.record(
                    session,
                    actor=principal.user_id,
                    tenant_id=tenant,
                    action="request.submitted",
                    object_type="request",
                    object_id=request.id,
                )
        except requests.DuplicateIdempotencyKey as duplicate:
            return await self.view(principal, duplicate.request_id), False
        await self.place(request, actor=principal.user_id)
        if idempotency_key:
            await caches.idempotency.complete(
                tenant_id=tenant,
                key=idempotency_key,
                request_id=request.id,
                ttl_s=self.brain.settings.idempotency_ttl_s,
            )
        return await self.view(principal, request.id), True

    async def place(self, request: PlacementRequest, *, actor: str) -> None:
        """Decide and reserve a stored pending request; leave it placed or rejected."""
        settings = self.brain.settings
        reason = (
            f"capacity kept changing during {settings.placement_attempts} attempts; submit again"
        )
        for _ in range(settings.placement_attempts):
            decision, fresh = await self._decide(request)
            if self.brain.national is not None and _needs_national(request, decision, fresh):
                await self._escalate(request, actor=actor)
                return
            if decision.status is DecisionStatus.REJECTED:
                if not fresh:
                    self.brain.capacity_changed()
                    continue
                reason = decision.reason or "rejected"
                await self._finish(request, decision, state="rejected", reason=reason, actor=actor)
                return
            engine = self.brain.placement.engine
            reservation = engine.reservation_for(request, decision)
            claim = ledger_store.claim_from(
                reservation, arrays=engine.arrays, tenant_id=request.tenant
            )
            decision = decision.model_copy(update={"reservation_id": reservation.id})
            self.brain.begin_local_change()
            try:
                async with self.brain.sessions.begin() as session:
                    await ledger_store.reserve(session, claim=claim, reservation_id=reservation.id)
                    await self._record(session, request, decision, "placed", None, actor)
            except ledger_store.CapacityConflict:
                self.brain.end_local_change(None)
                self.brain.capacity_changed()
                continue
            except ledger_store.QuotaExceeded as exceeded:
                self.brain.end_local_change(None)
                reason = f"the tenant's quota of {exceeded.resource} would be exceeded"
                rejected = decision.model_copy(
                    update={
                        "status": DecisionStatus.REJECTED,
                        "reservation_id": None,
                        "reason": reason,
                    }
                )
                await self._finish(request, rejected, state="rejected", reason=reason, actor=actor)
                return
            except BaseException:
                self.brain.end_local_change(None)
                self.brain.capacity_changed()
                raise
            self.brain.end_local_change(reservation)
            await self.brain.announce("capacity")
            return
        await self._finish(request, None, state="rejected", reason=reason, actor=actor)

    async def _escalate(self, request: PlacementRequest, *, actor: str) -> None:
        """Let the national brain place `request` across regions; it reserves in every owner
        (this brain's part included) before it answers."""
        assert self.brain.national is not None
        decision = await self.brain.national.escalate(request)
        placed = decision.status is DecisionStatus.PLACED
        async with self.brain.sessions.begin() as session:
            await self._record(
                session,
                request,
                decision,
                "placed" if placed else "rejected",
                None if placed else decision.reason or "rejected",
                actor,
            )

    async def quote(self, principal: Principal, body: dict[str, Any]) -> Quote:
        tenant = await self._tenant_of(principal, body)
        request = parse_request({**body, "id": new_request_id(), "tenant": tenant})
        check_request(request, self.brain.placement.map)
        decision, _ = await self._decide(request)
        chosen = decision.site
        alternatives = [
            c
            for c in (decision.explanation.candidates if decision.explanation else ())
            if c.site != chosen
        ]
        return Quote(decision=decision, alternatives=alternatives)

    async def cancel(self, principal: Principal, request_id: str) -> RequestView:
        await self._release_elsewhere(principal, request_id)
        self.brain.begin_local_change()
        try:
            await self._release(principal, request_id)
        finally:
            self.brain.end_local_change(None)
            self.brain.capacity_changed()
        await self.brain.announce("capacity")
        return await self.view(principal, request_id)

    async def _release_elsewhere(self, principal: Principal, request_id: str) -> None:
        """Release the cross-region reservation of a request placed by the national brain,
        in every owner; 503 when the national brain cannot be reached (nothing changes)."""
        national = self.brain.national
        if national is None:
            return
        async with self.brain.sessions() as session:
            record = await requests.get_request(
                session, tenant_id=principal.tenant_scope(), request_id=request_id
            )
            if record is None or record.state not in ACTIVE_STATES:
                return
            parts = await peer_ledger.parts_of_request(session, request_id=request_id)
        for part in parts:
            if part.state == peer_ledger.RELEASED:
                continue
            try:
                await national.release(part.id, "cancelled by the tenant")
            except grpc.aio.AioRpcError as error:
                raise unavailable(
                    f"the national brain could not release reservation {part.id!r} "
                    f"({error.code().name.lower()}); try again"
                ) from None

    async def _release(self, principal: Principal, request_id: str) -> None:
        async with self.brain.sessions.begin() as session:
            record = await requests.get_request(
                session, tenant_id=principal.tenant_scope(), request_id=request_id, for_update=True
            )
            if record is None:
                raise not_found("request", request_id)
            if record.state not in (*ACTIVE_STATES, "pending"):
                raise conflict(
                    f"request {request_id!r} is {record.state}; "
                    "only pending, placed or running requests can be cancelled"
                )
            for reservation_id in await ledger_store.held_reservations(
                session, request_id=request_id
            ):
                await ledger_store.release(session, reservation_id=reservation_id)
            await requests.set_state(
                session, request_id=request_id, state="cancelled", reason="cancelled by the tenant"
            )
            await audit.record(
                session,
                actor=principal.user_id,
                tenant_id=record.tenant_id,
                action="request.cancelled",
                object_type="request",
                object_id=request_id,
            )

    async def view(self, principal: Principal, request_id: str) -> RequestView:
        async with self.brain.sessions() as session:
            record = await requests.get_request(
                session, tenant_id=principal.tenant_scope(), request_id=request_id
            )
            if record is None:
                raise not_found("request", request_id)
            decision = await requests.get_decision(session, request_id=request_id)
        return _view(record, decision)

    async def list(
        self, principal: Principal, *, state: str | None, limit: int, cursor: str | None
    ) -> RequestPage:
        async with self.brain.sessions() as session:
            try:
                items, next_cursor = await requests.list_requests(
                    session,
                    tenant_id=principal.tenant_scope(),
                    state=state,
                    limit=limit,
                    cursor=cursor,
                )
            except requests.BadCursor:
                raise invalid("cursor", "not a cursor this brain issued") from None
            decisions = {r.id: await requests.get_decision(session, request_id=r.id) for r in items}
        return RequestPage(
            items=[_view(r, decisions[r.id]) for r in items], next_cursor=next_cursor
        )

    async def recover_pending(self) -> int:
        """Decide every request left pending by a stop; returns how many."""
        async with self.brain.sessions() as session:
            pending = await requests.pending_requests(session)
        for record in pending:
            await self.place(PlacementRequest.model_validate(record.body), actor="system")
        return len(pending)

    async def _decide(self, request: PlacementRequest) -> tuple[Decision, bool]:
        """A decision (nothing reserved) on the current snapshot, and whether that snapshot
        was read from the database just now."""
        snapshot, fresh = await self.brain.snapshot()
        engine = self.brain.placement.engine
        if snapshot.arrays is not engine.arrays:
            self.brain.capacity_changed()
            snapshot, fresh = await self.brain.snapshot()
            engine = self.brain.placement.engine
        async with self.brain.plan_lock:
            decision = await anyio.to_thread.run_sync(
                lambda: engine.place(request, reserve=False, snapshot=snapshot)
            )
        return decision, fresh

    async def _finish(
        self,
        request: PlacementRequest,
        decision: Decision | None,
        *,
        state: str,
        reason: str,
        actor: str,
    ) -> None:
        async with self.brain.sessions.begin() as session:
            await self._record(session, request, decision, state, reason, actor)

    @staticmethod
    async def _record(
        session: Any,
        request: PlacementRequest,
        decision: Decision | None,
        state: str,
        reason: str | None,
        actor: str,
    ) -> None:
        if decision is not None:
            await requests.save_decision(
                session, request_id=request.id, document=decision.model_dump(mode="json")
            )
        await requests.set_state(
            session,
            request_id=request.id,
            state=state,
            reason=reason,
            site_id=decision.site if decision is not None and state == "placed" else None,
        )
        await audit.record(
            session,
            actor=actor,
            tenant_id=request.tenant,
            action=f"request.{state}",
            object_type="request",
            object_id=request.id,
            detail={"site": decision.site}
            if decision is not None and decision.site
            else {"reason": reason},
        )

    async def _tenant_of(self, principal: Principal, body: dict[str, Any]) -> str:
        """The tenant a request is for: the caller's own, or the one staff name."""
        asked = body.get("tenant")
        if principal.is_staff:
            if not isinstance(asked, str) or not asked:
                raise invalid("tenant", "staff must name the tenant a request is for")
            async with self.brain.sessions() as session:
                if await tenants.get_tenant(session, tenant_id=asked) is None:
                    raise invalid("tenant", f"unknown tenant {asked!r}")
            return asked
        assert principal.tenant_id is not None
        if asked is not None and asked != principal.tenant_id:
            raise forbidden(f"you may submit only for tenant {principal.tenant_id!r}")
        return principal.tenant_id


def _needs_national(request: PlacementRequest, decision: Decision, fresh: bool) -> bool:
    """A federated brain places only inside the request's own province; the national brain
    places the rest (and everything that asks for the national optimum). A rejection on a
    cached snapshot is not final: it is decided again on a fresh one first."""
    if request.national_optimum:
        return True
    if decision.status is DecisionStatus.REJECTED:
        return fresh
    return decision.path is None or any(
        s.kind is not SegmentKind.LOCAL for s in decision.path.segments
    )


def _view(record: PlacementRequestRecord, decision: dict[str, Any] | None) -> RequestView:
    return RequestView(
        id=record.id,
        tenant=record.tenant_id,
        state=record.state,
        reason=record.reason,
        site=record.site_id,
        created_at=record.created_at,
        updated_at=record.updated_at,
        request=PlacementRequest.model_validate(record.body),
        decision=Decision.model_validate(decision) if decision is not None else None,
    )
