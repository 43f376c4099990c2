"""Submitting, quoting and cancelling requests: the engine decides, the database reserves.

A submission passes the gate (the tenant's rate limit and the claim of its idempotency key,
one round trip to the cache) and is checked against the map; then it joins the brain's
group commit (`cnbrain.group_commit`), which settles the submissions waiting together:

1. One transaction stores all of them as `pending` (with their audit entries), so an accepted
   request is never lost: a brain that stops before step 3 commits leaves them pending, and
   decides them when it starts again (`recover_pending`).
2. The engine decides them together on the brain's snapshot (`place_batch`: requests of one
   batch never count on the same capacity).
3. One transaction takes every reservation with `ledger_store.reserve_many` (the sums per
   site, accelerator pool, link and tenant quota, by conditional updates), stores the
   decisions and moves the requests to `placed` or `rejected`. Rejections on a cached snapshot
   are not final: those requests are decided again on a fresh one.

Whenever the batch cannot be settled so (another replica took capacity the snapshot showed
free, a quota would be exceeded, the engine or the database failed on the batch), it rolls
back and each request of the batch goes the one-request way instead (`place`): up to
`placement_attempts` times, decide on the current snapshot and take the reservation in one
transaction; on a conflict, refresh the snapshot and decide again. So correctness never
depends on the batch; the batch only saves statements and round trips.

Each caller gets its own answer, built from what was written (no read-back), except after the
one-request way, which reads the request back.
"""

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import anyio
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.cache import PENDING
from cnbrain.domain.bounds import has_control_characters
from cnbrain.domain.decision import Decision, DecisionStatus, SegmentKind
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.states import RUNNABLE, RequestState, ReservationState
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.group_commit import Again, GroupCommit
from cnbrain.ledger.reservation import Reservation
from cnbrain.netmap.arrays import MapArrays
from cnbrain.placement.request_check import check_request, parse_request
from cnbrain.regional.brain import Brain
from cnbrain.regional.problems import (
    ApiError,
    conflict,
    forbidden,
    invalid,
    not_found,
    unavailable,
)
from cnbrain.regional.schemas import Quote, RequestPage, RequestView
from cnbrain.regional.security import Principal
from cnbrain.regional.stored_requests import stored_request
from cnbrain.storage import audit, ledger_store, peer_ledger, requests, tenants
from cnbrain.storage.models import PlacementRequestRecord

log = logging.getLogger("cnbrain.regional")


def new_request_id() -> str:
    return f"req-{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True, slots=True)
class Submission:
    """A checked request on its way into the group commit; `body` is its JSON as stored."""

    request: PlacementRequest
    user_id: str
    idempotency_key: str | None
    body: requests.JsonText


@dataclass(frozen=True, slots=True)
class SubmissionOutcome:
    """What became of a submission: `request_id` is its request, or (`created` False) the
    earlier request that holds its idempotency key. `view` is the request as settled, or None
    when the caller must read it (an earlier request, or one settled the one-request way).
    `escalate`: the request (stored pending at `created_at`) can be placed only by the
    national brain; the caller escalates it (outside the group commit, so one slow escalation
    holds up no batch).
    """

    request_id: str
    created: bool
    view: RequestView | None = None
    escalate: bool = False
    created_at: datetime | None = None

    @classmethod
    def escalating(cls, item: "_Stored") -> "SubmissionOutcome":
        """The outcome of a stored request that only the national brain can place."""
        return cls(item.request.id, created=True, escalate=True, created_at=item.created_at)


@dataclass(frozen=True, slots=True)
class _Stored:
    """A stored pending request to decide; `actor` is who submitted it (or "system");
    `decided` how many times it was decided already (each time rejected on a cached
    snapshot)."""

    request: PlacementRequest
    actor: str
    created_at: datetime
    idempotency_key: str | None = None
    decided: int = 0


_Item = Submission | _Stored
"""What the group commit settles: a new submission, or a stored request to decide again."""


@dataclass(frozen=True, slots=True)
class EscalatedAnswer:
    """The national brain's answer for a pending request, to record."""

    request: PlacementRequest
    decision: Decision
    actor: str


class PlacementService:
    """The requests of one brain: one per brain, built with it (`app`), with the brain's
    group commits of submissions and of the national brain's answers."""

    def __init__(self, brain: Brain) -> None:
        self.brain = brain
        self.group_commit: GroupCommit[_Item, SubmissionOutcome] = GroupCommit(
            self._settle_submissions
        )
        self.escalation_records: GroupCommit[EscalatedAnswer, _Written] = GroupCommit(
            self._record_escalated
        )

    async def submit(
        self, principal: Principal, body: dict[str, Any], *, idempotency_key: str | None
    ) -> tuple[RequestView, bool]:
        """Admit, check, store, decide and reserve. Returns the request and whether it is new
        (False when the idempotency key names an earlier submission of the same request, which
        is returned as it stands). Raises ApiError 429 (rate limit), 403 or 422 (nothing is
        stored then; 422 too when the key names an earlier submission of another request)."""
        settings, caches = self.brain.settings, self.brain.caches
        ttl = settings.idempotency_ttl_s
        claim_tenant = None if principal.is_staff else principal.tenant_id
        admission = await caches.gate.admit(
            rate_key=principal.tenant_id or principal.user_id,
            limit_per_minute=settings.rate_limit_per_minute,
            tenant_id=claim_tenant or "",
            idempotency_key=idempotency_key if claim_tenant else None,
            ttl_s=ttl,
        )
        if not admission.rate.allowed:
            raise too_many(settings.rate_limit_per_minute, admission.rate.retry_after_s)
        earlier = admission.earlier
        claimed = bool(idempotency_key and claim_tenant and earlier is None)
        try:
            tenant = await self._tenant_of(principal, body)
            request = parse_request({**body, "id": new_request_id(), "tenant": tenant})
            check_request(request, self.brain.placement.map)
        except BaseException:
            if claimed and idempotency_key and claim_tenant:
                await caches.idempotency.forget(tenant_id=claim_tenant, key=idempotency_key)
            raise
        if idempotency_key and not claim_tenant:  # staff: the tenant is known only now
            earlier = await caches.idempotency.claim(
                tenant_id=tenant, key=idempotency_key, ttl_s=ttl
            )
        if earlier is not None and earlier != PENDING:
            return _replay(await self.view(principal, earlier), request), False
        outcome = await self.group_commit.submit(
            Submission(
                request=request,
                user_id=principal.user_id,
                idempotency_key=idempotency_key,
                body=requests.JsonText(request.model_dump_json()),
            )
        )
        if outcome.escalate:
            written = await self._escalate(request, actor=principal.user_id)
            assert outcome.created_at is not None
            return written.as_of(outcome.created_at), True
        view = outcome.view
        if view is None:
            view = await self.view(principal, outcome.request_id)
        return (view, True) if outcome.created else (_replay(view, request), False)

    async def _settle_submissions(
        self, batch: Sequence[_Item]
    ) -> list[SubmissionOutcome | BaseException | Again[_Item]]:
        """The group commit's work: store the new submissions of `batch` as pending in one
        transaction, then decide and reserve them with the stored requests of `batch` (see the
        module docstring). One outcome, exception or `Again` (decide once more, with the next
        batch) per item."""
        async with self.brain.sessions() as session:  # one connection for the whole batch
            stored, early = await self._store(
                session, [s for s in batch if isinstance(s, Submission)]
            )
            settled = await self._place_stored(
                [s for s in batch if isinstance(s, _Stored)] + stored, session
            )
        answers = [
            (item.request.tenant, item.idempotency_key, item.request.id)
            for item in (*stored, *(s for s in batch if isinstance(s, _Stored)))
            if item.idempotency_key and isinstance(settled[item.request.id], SubmissionOutcome)
        ]
        if answers:
            try:
                await self.brain.caches.idempotency.complete_many(
                    answers, ttl_s=self.brain.settings.idempotency_ttl_s
                )
            except Exception:  # the database's unique key keeps the promise without the cache
                log.warning("could not remember %d idempotency keys", len(answers), exc_info=True)
        results: list[SubmissionOutcome | BaseException | Again[_Item]] = []
        for item in batch:
            result = early.get(item.request.id) or settled[item.request.id]
            results.append(Again(result) if isinstance(result, _Stored) else result)
        return results

    async def _store(
        self, session: AsyncSession, submissions: Sequence[Submission]
    ) -> tuple[list[_Stored], dict[str, SubmissionOutcome | BaseException]]:
        """Store `submissions` as pending in one transaction. Returns the stored ones, and the
        answers of the others by request id: the earlier request holding an idempotency key,
        or (when the batch cannot be stored together) each one's outcome the one-request way."""
        if not submissions:
            return [], {}
        new = [
            requests.NewRequest(
                request_id=s.request.id,
                tenant_id=s.request.tenant,
                user_id=s.user_id,
                body=s.body,
                idempotency_key=s.idempotency_key,
            )
            for s in submissions
        ]
        try:
            async with session.begin():
                earlier = await requests.insert_requests(session, new)
                await audit.record_many(
                    session,
                    [
                        audit.Entry(
                            actor=n.user_id,
                            tenant_id=n.tenant_id,
                            action="request.submitted",
                            object_type="request",
                            object_id=n.request_id,
                            at=n.created_at,
                        )
                        for n, e in zip(new, earlier, strict=True)
                        if e is None
                    ],
                )
        except requests.RequestStoreError:
            # One of them cannot be stored (say, its user was removed meanwhile): each alone.
            return [], {s.request.id: await self._submit_alone(s) for s in submissions}
        stored = [
            _Stored(
                request=s.request,
                actor=s.user_id,
                created_at=n.created_at,
                idempotency_key=s.idempotency_key,
            )
            for s, n, e in zip(submissions, new, earlier, strict=True)
            if e is None
        ]
        duplicates: dict[str, SubmissionOutcome | BaseException] = {
            s.request.id: SubmissionOutcome(request_id=e, created=False)
            for s, e in zip(submissions, earlier, strict=True)
            if e is not None
        }
        return stored, duplicates

    async def _submit_alone(self, submission: Submission) -> SubmissionOutcome | BaseException:
        """One submission the one-request way: store it (its own transaction), place it."""
        request = submission.request
        try:
            async with self.brain.sessions.begin() as session:
                await requests.insert_request(
                    session,
                    request_id=request.id,
                    tenant_id=request.tenant,
                    user_id=submission.user_id,
                    idempotency_key=submission.idempotency_key,
                    body=json.loads(submission.body),
                )
                await audit.record(
                    session,
                    actor=submission.user_id,
                    tenant_id=request.tenant,
                    action="request.submitted",
                    object_type="request",
                    object_id=request.id,
                )
        except requests.DuplicateIdempotencyKey as duplicate:
            return SubmissionOutcome(request_id=duplicate.request_id, created=False)
        except Exception as exc:
            return exc
        try:
            await self.place(request, actor=submission.user_id)
        except Exception as exc:
            return exc
        if submission.idempotency_key:
            try:
                await self.brain.caches.idempotency.complete(
                    tenant_id=request.tenant,
                    key=submission.idempotency_key,
                    request_id=request.id,
                    ttl_s=self.brain.settings.idempotency_ttl_s,
                )
            except Exception:  # the database's unique key keeps the promise without the cache
                log.warning("could not remember idempotency key of %s", request.id, exc_info=True)
        return SubmissionOutcome(request_id=request.id, created=True)

    async def _place_stored(
        self, stored: Sequence[_Stored], session: AsyncSession
    ) -> dict[str, SubmissionOutcome | BaseException | _Stored]:
        """Decide stored pending requests together and reserve (the batch's transaction in
        `session`). By request id: the outcome (with the view as settled, or without after
        the one-request way), the exception, or the request to decide again on a fresh
        snapshot (it was rejected on a cached one; the cached one is dropped)."""
        brain = self.brain
        settled: dict[str, SubmissionOutcome | BaseException | _Stored] = {}
        if brain.national is not None:
            # Only the national brain places these: no local decision to take first.
            for item in stored:
                if item.request.national_optimum:
                    settled[item.request.id] = SubmissionOutcome.escalating(item)
            stored = [item for item in stored if item.request.id not in settled]
        if not stored:
            return settled
        one_by_one: list[_Stored] = []
        try:
            arrays, decisions, reservations, fresh = await self._decide_batch(
                [r.request for r in stored]
            )
        except Exception:
            log.warning("the engine failed on a batch; deciding one by one", exc_info=True)
            arrays, decisions, reservations, fresh = None, [], [], False
            one_by_one += stored
        placed: list[tuple[_Stored, Decision, Reservation]] = []
        rejected: list[tuple[_Stored, Decision]] = []
        stale: list[_Stored] = []
        for item, decision, reservation in zip(stored, decisions, reservations, strict=False):
            if brain.national is not None and _needs_national(item.request, decision, fresh):
                settled[item.request.id] = SubmissionOutcome.escalating(item)
            elif reservation is not None:
                placed.append((item, decision, reservation))
            elif fresh:
                rejected.append((item, decision))
            else:
                stale.append(item)
        if arrays is not None and (placed or rejected):
            try:
                settled.update(await self._commit(session, arrays, placed, rejected))
            except (ledger_store.CapacityConflict, ledger_store.QuotaExceeded):
                one_by_one += [item for item, _, _ in placed] + [item for item, _ in rejected]
            except Exception:
                log.warning("a batch failed to commit; placing one by one", exc_info=True)
                one_by_one += [item for item, _, _ in placed] + [item for item, _ in rejected]
        if stale:
            brain.capacity_changed()  # rejections on a cached snapshot are not final
            attempts = brain.settings.placement_attempts
            settled.update(await self._give_up([i for i in stale if i.decided + 1 >= attempts]))
            for item in stale:
                if item.decided + 1 < attempts:
                    settled[item.request.id] = replace(item, decided=item.decided + 1)
        for item in one_by_one:
            try:
                await self.place(item.request, actor=item.actor)
                settled[item.request.id] = SubmissionOutcome(
                    request_id=item.request.id, created=True
                )
            except Exception as exc:
                settled[item.request.id] = await self._fail(item, exc)
        return settled

    async def _fail(self, item: _Stored, error: Exception) -> SubmissionOutcome | BaseException:
        """What becomes of a stored request whose decision raised `error`: after an outage
        (see `_leaves_pending`) it stays pending and `error` is returned; otherwise it ends
        failed, with the reason, in one transaction with its audit entry, and its outcome is
        returned (or the error of that transaction, if it fails too)."""
        if _leaves_pending(error):
            return error
        log.error("the decision of request %s failed", item.request.id, exc_info=error)
        reason = f"the brain could not decide this request ({type(error).__name__}); see its log"
        try:
            await self._finish(
                item.request, None, state=RequestState.FAILED, reason=reason, actor=item.actor
            )
        except Exception as exc:
            return exc
        return SubmissionOutcome(request_id=item.request.id, created=True)

    async def _decide_batch(
        self, batch: Sequence[PlacementRequest]
    ) -> tuple[MapArrays, list[Decision], list[Reservation | None], bool]:
        """Decisions for `batch` taken together on the current snapshot (nothing reserved):
        the arrays of the map they were taken on (reservations hold indices into them), the
        decisions, the reservation each placed one needs (None for a rejection), and whether
        the snapshot was read from the database just now."""
        snapshot, fresh = await self.brain.snapshot()
        engine = self.brain.placement.engine
        if snapshot.arrays is not engine.arrays:
            self.brain.capacity_changed()
            snapshot, fresh = await self.brain.snapshot()
            engine = self.brain.placement.engine

        def decide() -> tuple[list[Decision], list[Reservation | None]]:
            decisions = engine.place_batch(batch, reserve=False, snapshot=snapshot)
            reservations = [
                engine.reservation_for(request, decision)
                if decision.status is DecisionStatus.PLACED
                else None
                for request, decision in zip(batch, decisions, strict=True)
            ]
            return decisions, reservations

        async with self.brain.plan_lock:
            decisions, reservations = await anyio.to_thread.run_sync(decide)
        return engine.arrays, decisions, reservations, fresh

    async def _commit(
        self,
        session: AsyncSession,
        arrays: MapArrays,
        placed: Sequence[tuple[_Stored, Decision, Reservation]],
        rejected: Sequence[tuple[_Stored, Decision]],
    ) -> dict[str, SubmissionOutcome]:
        """One transaction: take every reservation of `placed` (indices into `arrays`) with
        `reserve_many`, store every decision, move the requests to placed or rejected, audit.
        Raises (after rolling back) CapacityConflict or QuotaExceeded when the sums do not fit,
        or any database error."""
        brain = self.brain
        claims = [
            (r.id, ledger_store.claim_from(r, arrays=arrays, tenant_id=item.request.tenant))
            for item, _, r in placed
        ]
        final = [
            (
                item,
                _Written(
                    item.request,
                    d.model_copy(update={"reservation_id": r.id}),
                    RequestState.PLACED,
                    None,
                    item.actor,
                ),
            )
            for item, d, r in placed
        ] + [
            (
                item,
                _Written(
                    item.request, d, RequestState.REJECTED, d.reason or "rejected", item.actor
                ),
            )
            for item, d in rejected
        ]
        async with brain.changes.begin(session) as (_, change):
            await ledger_store.reserve_many(session, claims=claims)
            at = await _write(session, [written for _, written in final])
            for _, _, reservation in placed:
                change.took(reservation)
        return {
            item.request.id: SubmissionOutcome(
                request_id=item.request.id,
                created=True,
                view=replace(written, at=at).as_of(item.created_at),
            )
            for item, written in final
        }

    async def _give_up(
        self, stale: Sequence[_Stored]
    ) -> dict[str, SubmissionOutcome | BaseException | _Stored]:
        """Reject requests still rejected only on cached snapshots after every attempt."""
        reason = (
            f"capacity kept changing during {self.brain.settings.placement_attempts} attempts; "
            "submit again"
        )
        settled: dict[str, SubmissionOutcome | BaseException | _Stored] = {}
        for item in stale:
            try:
                await self._finish(
                    item.request, None, state=RequestState.REJECTED, reason=reason, actor=item.actor
                )
                settled[item.request.id] = SubmissionOutcome(
                    request_id=item.request.id, created=True
                )
            except Exception as exc:
                settled[item.request.id] = exc
        return settled

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
                await self._finish(
                    request, decision, state=RequestState.REJECTED, reason=reason, actor=actor
                )
                return
            engine = self.brain.placement.engine
            reservation = engine.reservation_for(request, decision)
            claim = ledger_store.claim_from(
                reservation, arrays=engine.arrays, tenant_id=request.tenant
            )
            decision = decision.model_copy(update={"reservation_id": reservation.id})
            try:
                async with self.brain.changes.begin() as (session, change):
                    await ledger_store.reserve(session, claim=claim, reservation_id=reservation.id)
                    await self._record(session, request, decision, RequestState.PLACED, None, actor)
                    change.took(reservation)
            except ledger_store.CapacityConflict:
                continue
            except ledger_store.QuotaExceeded as exceeded:
                reason = f"the tenant's quota of {exceeded.resource} would be exceeded"
                rejected = decision.model_copy(
                    update={
                        "status": DecisionStatus.REJECTED,
                        "reservation_id": None,
                        "reason": reason,
                    }
                )
                await self._finish(
                    request, rejected, state=RequestState.REJECTED, reason=reason, actor=actor
                )
                return
            return
        await self._finish(request, None, state=RequestState.REJECTED, reason=reason, actor=actor)

    async def _escalate(self, request: PlacementRequest, *, actor: str) -> "_Written":
        """Let the national brain place `request` across regions (it reserves in every owner,
        this brain's part included, before it answers) and record its answer: placed or
        rejected. Answers that arrive together are recorded in one transaction."""
        assert self.brain.national is not None
        decision = await self.brain.national.escalate(request)
        return await self.escalation_records.submit(EscalatedAnswer(request, decision, actor))

    async def _record_escalated(
        self, batch: Sequence[EscalatedAnswer]
    ) -> list["_Written | BaseException"]:
        """The escalation records' group commit: one transaction for the whole batch; if it
        fails (say a request was cancelled meanwhile), each one in its own transaction, so
        only the requests at fault get their error."""
        written = [_Written.of_answer(e.request, e.decision, e.actor) for e in batch]
        try:
            async with self.brain.sessions.begin() as session:
                at = await _write(session, written)
            return [replace(w, at=at) for w in written]
        except Exception:
            if len(batch) == 1:
                raise
        results: list[_Written | BaseException] = []
        for one in written:
            try:
                async with self.brain.sessions.begin() as session:
                    results.append(replace(one, at=await _write(session, [one])))
            except Exception as exc:
                results.append(exc)
        return results

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
        await self._release(principal, request_id)
        if self.brain.wake_dispatcher is not None:
            self.brain.wake_dispatcher()  # it cancels the request's job on its scheduler
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
            if record is None or record.state not in RUNNABLE:
                return
            parts = await peer_ledger.parts_of_request(session, request_id=request_id)
        for part in parts:
            if part.state == ReservationState.RELEASED:
                continue
            try:
                await national.release(part.id, "cancelled by the tenant")
            except PeerUnavailable as error:
                raise unavailable(
                    f"the national brain could not release reservation {part.id!r} "
                    f"({error.cause}); try again"
                ) from None
            # The national brain has released this brain's part through its LedgerService,
            # unless it no longer knew the reservation; then the part is released here.
            async with self.brain.sessions.begin() as session:
                released_here = await peer_ledger.release(session, reservation_id=part.id)
            if released_here:
                self.brain.peer_changed()

    async def _release(self, principal: Principal, request_id: str) -> None:
        async with self.brain.changes.begin() as (session, change):
            record = await requests.get_request(
                session, tenant_id=principal.tenant_scope(), request_id=request_id, for_update=True
            )
            if record is None:
                raise not_found("request", request_id)
            if record.state == RequestState.PENDING:
                raise conflict(
                    f"request {request_id!r} is pending: it is being decided now; "
                    "cancel it once it is placed"
                )
            if record.state not in RUNNABLE:
                raise conflict(
                    f"request {request_id!r} is {record.state}; "
                    "only requests placed and whose job has not ended can be cancelled"
                )
            for reservation_id in await ledger_store.held_reservations(
                session, request_id=request_id
            ):
                await ledger_store.release(session, reservation_id=reservation_id)
            change.free()
            await requests.set_state(
                session,
                request_id=request_id,
                state=RequestState.CANCELLED,
                reason="cancelled by the tenant",
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
            found = await requests.get_request_and_decision(
                session, tenant_id=principal.tenant_scope(), request_id=request_id
            )
        if found is None:
            raise not_found("request", request_id)
        return _view(*found)

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
            decisions = await requests.get_decisions(session, request_ids=[r.id for r in items])
        return RequestPage(
            items=[_view(r, decisions.get(r.id)) for r in items], next_cursor=next_cursor
        )

    async def recover_pending(self, *, created_before: datetime) -> int:
        """Decide every request created before `created_before` and left pending by a stop,
        in batches like submissions; returns how many are still pending because of an outage
        (the database, the national brain): the caller tries again later. A request that
        another replica (recovering too) or a cancellation settled meanwhile is left as it is;
        one whose stored form is no longer a valid request (stored by an earlier version) ends
        failed, with the reason; one whose decision fails ends failed too (`_fail`)."""
        async with self.brain.sessions() as session:
            pending = await requests.pending_requests(session, created_before=created_before)
        stored: list[_Stored] = []
        for record in pending:
            request, problem = stored_request(record.body)
            if request is None:
                await self._fail_unreadable(record, problem)
            else:
                stored.append(_Stored(request, actor="system", created_at=record.created_at))
        left = 0
        for start in range(0, len(stored), RECOVERY_BATCH):
            chunk = stored[start : start + RECOVERY_BATCH]
            while chunk:
                async with self.brain.sessions() as session:
                    settled = await self._place_stored(chunk, session)
                for item in chunk:
                    left += not await self._recovered(item, settled.get(item.request.id))
                chunk = [again for again in settled.values() if isinstance(again, _Stored)]
        return left

    async def _recovered(
        self, item: _Stored, outcome: "SubmissionOutcome | BaseException | _Stored | None"
    ) -> bool:
        """Whether recovery is done with `item` given its outcome (False: it stays pending
        after an outage, to try again)."""
        request_id = item.request.id
        if isinstance(outcome, requests.InvalidTransition):
            log.info("request %s was settled elsewhere meanwhile", request_id)
        elif isinstance(outcome, BaseException):
            log.warning("request %s stays pending: %s", request_id, outcome)
            return False
        elif isinstance(outcome, SubmissionOutcome) and outcome.escalate:
            try:
                await self._escalate(item.request, actor="system")
            except Exception as exc:
                log.warning("request %s stays pending: the national brain: %s", request_id, exc)
                return False
        return True

    async def _fail_unreadable(self, record: PlacementRequestRecord, problem: str) -> None:
        """End a pending request whose stored form is not a valid request: failed, with the
        reason, in one transaction with its audit entry (unless it was settled meanwhile)."""
        log.error("request %s cannot be read back (%s); it fails", record.id, problem)
        reason = f"its stored form is no longer a valid request: {problem}"
        try:
            async with self.brain.sessions.begin() as session:
                await requests.set_state(
                    session, request_id=record.id, state=RequestState.FAILED, reason=reason
                )
                await audit.record(
                    session,
                    actor="system",
                    tenant_id=record.tenant_id,
                    action="request.failed",
                    object_type="request",
                    object_id=record.id,
                    detail={"reason": reason},
                )
        except requests.InvalidTransition:
            log.info("request %s was settled elsewhere meanwhile", record.id)

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
            site_id=decision.site
            if decision is not None and state == RequestState.PLACED
            else None,
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
            if has_control_characters(asked):
                raise invalid("tenant", "must not contain control characters")
            if asked not in self.brain.known_tenants:
                async with self.brain.sessions() as session:
                    if await tenants.get_tenant(session, tenant_id=asked) is None:
                        raise invalid("tenant", f"unknown tenant {asked!r}")
                self.brain.known_tenants.add(asked)
            return asked
        assert principal.tenant_id is not None
        if asked is not None and asked != principal.tenant_id:
            raise forbidden(f"you may submit only for tenant {principal.tenant_id!r}")
        return principal.tenant_id


RECOVERY_BATCH = 64
"""Pending requests decided together at a start."""


@dataclass(frozen=True, slots=True)
class _Written:
    """A request's settled state as written (`at`: when, once written)."""

    request: PlacementRequest
    decision: Decision
    state: str
    reason: str | None
    actor: str
    at: datetime | None = None

    @classmethod
    def of_answer(cls, request: PlacementRequest, decision: Decision, actor: str) -> "_Written":
        """The national brain's answer: placed, or rejected with its reason."""
        if decision.status is DecisionStatus.PLACED:
            return cls(request, decision, RequestState.PLACED, None, actor)
        return cls(request, decision, RequestState.REJECTED, decision.reason or "rejected", actor)

    def as_of(self, created_at: datetime) -> RequestView:
        """The request's view, built from what was written."""
        assert self.at is not None
        return RequestView(
            id=self.request.id,
            tenant=self.request.tenant,
            state=RequestState(self.state),
            reason=self.reason,
            site=self.decision.site if self.state == RequestState.PLACED else None,
            created_at=created_at,
            updated_at=self.at,
            request=self.request,
            decision=self.decision,
        )


async def _write(session: AsyncSession, written: Sequence[_Written]) -> datetime:
    """Move every request of `written` to its state, store its decision and audit it, with one
    statement each for all of them; returns the time written. Raises like
    `requests.set_states` (the caller rolls back)."""
    at = await requests.set_states(
        session,
        [
            requests.StateChange(
                request_id=w.request.id,
                state=w.state,
                reason=w.reason,
                site_id=w.decision.site if w.state == RequestState.PLACED else None,
            )
            for w in written
        ],
    )
    await requests.save_decisions(
        session,
        {w.request.id: requests.JsonText(w.decision.model_dump_json()) for w in written},
        at=at,
    )
    await audit.record_many(
        session,
        [
            audit.Entry(
                actor=w.actor,
                tenant_id=w.request.tenant,
                action=f"request.{w.state}",
                object_type="request",
                object_id=w.request.id,
                detail={"site": w.decision.site} if w.decision.site else {"reason": w.reason},
                at=at,
            )
            for w in written
        ],
    )
    return at


def too_many(limit_per_minute: int, retry_after_s: float) -> ApiError:
    """The 429 answer of a tenant over its rate limit."""
    return ApiError(
        429,
        "Too Many Requests",
        f"rate limit of {limit_per_minute} per minute reached",
        headers={"Retry-After": str(max(1, round(retry_after_s)))},
    )


def _replay(earlier: RequestView, request: PlacementRequest) -> RequestView:
    """`earlier`, the request that holds an idempotency key, if it is `request` (the same
    request as parsed, whatever its id); else ApiError 422 naming the header. An earlier
    request whose stored body no longer validates (`request` None) is never the same."""
    stored = earlier.request
    if stored is None or stored.model_dump(exclude={"id"}) != request.model_dump(exclude={"id"}):
        raise invalid(
            "Idempotency-Key",
            f"already used for request {earlier.id!r}, which differs from this one; "
            "use a new key for a new request",
        )
    return earlier


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


def _leaves_pending(error: Exception) -> bool:
    """Whether a decision that raised `error` leaves its request pending, to be decided again
    (with the next batch, or at the next start): an outage of the database or of the national
    brain, a change another replica made meanwhile, or an answer meant for the caller."""
    if isinstance(error, DBAPIError):
        return error.connection_invalidated or isinstance(error, OperationalError | InterfaceError)
    return isinstance(
        error,
        OSError | TimeoutError | PeerUnavailable | requests.InvalidTransition | ApiError,
    )


def _view(record: PlacementRequestRecord, decision: dict[str, Any] | None) -> RequestView:
    """The view of a stored request. One stored by an earlier version that no longer
    validates is shown without its request (and without a decision that no longer
    validates); left pending, it is shown failed, as the next start leaves it."""
    request, problem = stored_request(record.body)
    state, reason = record.state, record.reason
    if request is None and state == RequestState.PENDING:
        state, reason = (
            RequestState.FAILED,
            f"its stored form is no longer a valid request: {problem}",
        )
    try:
        document = Decision.model_validate(decision) if decision is not None else None
    except ValidationError:
        document = None
    return RequestView(
        id=record.id,
        tenant=record.tenant_id,
        state=RequestState(state),
        reason=reason,
        site=record.site_id,
        created_at=record.created_at,
        updated_at=record.updated_at,
        request=request,
        decision=document,
    )
