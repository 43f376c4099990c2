"""Deciding stored pending requests and taking their reservations: together in the group
commit's batch, or the one-request way when the batch cannot be settled so (see the
package docstring). The national brain places what this brain cannot place alone."""

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.dataplane.steering import SteeringError
from cnbrain.domain.decision import STEERING_REASON, Decision, DecisionStatus, SegmentKind
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.states import RequestState
from cnbrain.federation.steered_paths import Steered
from cnbrain.group_commit import GroupCommit
from cnbrain.ledger.claim import claim_from, window_of
from cnbrain.ledger.reservation import Reservation
from cnbrain.netmap.arrays import MapArrays
from cnbrain.regional.outages import outage_of
from cnbrain.regional.schemas import RequestView
from cnbrain.regional.unit_of_work import CapacityChanges
from cnbrain.regional.use_cases.cohort_quota import CohortQuotas
from cnbrain.regional.use_cases.deciding import Decider
from cnbrain.regional.use_cases.new_requests import Submission, insert_submissions
from cnbrain.regional.use_cases.outcomes import Outcome, write_outcomes
from cnbrain.regional.use_cases.ports import NationalClient
from cnbrain.storage import ledger_store, requests, tenants
from cnbrain.storage.errors import CohortQuotaExceeded

log = logging.getLogger("cnbrain.regional")


@dataclass(frozen=True, slots=True)
class Stored:
    """A stored pending request to decide; `actor` is who submitted it (or "system");
    `decided` how many times it was decided already (each time rejected on a cached
    snapshot)."""

    request: PlacementRequest
    actor: str
    created_at: datetime
    idempotency_key: str | None = None
    decided: int = 0


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
    def escalating(cls, item: Stored) -> "SubmissionOutcome":
        """The outcome of a stored request that only the national brain can place."""
        return cls(item.request.id, created=True, escalate=True, created_at=item.created_at)


Settled = SubmissionOutcome | BaseException | Stored
"""What deciding a stored request gave: its outcome, the error, or the request to decide
again on a fresh snapshot."""


@dataclass(frozen=True, slots=True)
class EscalatedAnswer:
    """The national brain's answer for a pending request, to record."""

    request: PlacementRequest
    decision: Decision
    actor: str


class Placer:
    """Decides and reserves the stored pending requests of one brain. `forget()` drops the
    cached snapshot; `attempts` bounds the one-request way's decisions of one request;
    `queued()` is told when requests were queued (they wait for the admission loop). With
    `steered`, every reservation taken is steered in the data plane before its transaction
    commits: a request whose path cannot be steered is rejected (its reason
    `domain.decision.STEERING_REASON`, the data plane's details in the log)."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        changes: CapacityChanges,
        decider: Decider,
        national: NationalClient | None,
        forget: Callable[[], None],
        attempts: int,
        queued: Callable[[], None] = lambda: None,
        cohorts: CohortQuotas | None = None,
        steered: Steered | None = None,
    ) -> None:
        self._steered = steered
        self._sessions = sessions
        self._cohorts = cohorts or CohortQuotas()
        self._queued = queued
        self._changes = changes
        self._decider = decider
        self._national = national
        self._forget = forget
        self._attempts = attempts
        self._gave_up = f"capacity kept changing during {attempts} attempts; submit again"
        """The reason of a rejection after `attempts` decisions that capacity changed under."""
        self.escalation_records: GroupCommit[EscalatedAnswer, Outcome] = GroupCommit(
            self._record_escalated
        )
        """The national brain's answers that arrive together, recorded in one transaction."""

    async def place_stored(
        self, stored: Sequence[Stored], session: AsyncSession
    ) -> dict[str, Settled]:
        """Decide stored pending requests together and reserve (the batch's transaction in
        `session`). By request id: the outcome (with the view as settled, or without after
        the one-request way), the exception, or the request to decide again on a fresh
        snapshot (it was rejected on a cached one; the cached one is dropped)."""
        settled: dict[str, Settled] = {}
        waiting = [item for item in stored if item.request.start == "queue"]
        if waiting:
            stored = [item for item in stored if item.request.start != "queue"]
            settled.update(await self._queue(waiting, session))
        if self._national is not None:
            # Only the national brain places these: no local decision to take first.
            limited = await self._nationally_limited(item.request for item in stored)
            for item in stored:
                if item.request.national_optimum or item.request.tenant in limited:
                    settled[item.request.id] = SubmissionOutcome.escalating(item)
            stored = [item for item in stored if item.request.id not in settled]
        if not stored:
            return settled
        one_by_one: list[Stored] = []
        try:
            arrays, decisions, reservations, fresh = await self._decider.decide(
                [r.request for r in stored]
            )
        except Exception:
            log.warning("the engine failed on a batch; deciding one by one", exc_info=True)
            arrays, decisions, reservations, fresh = None, [], [], False
            one_by_one += stored
        decided: list[tuple[Stored, Outcome, Reservation | None]] = []
        stale: list[Stored] = []
        for item, decision, reservation in zip(stored, decisions, reservations, strict=False):
            if self._national is not None and needs_national(item.request, decision, fresh):
                settled[item.request.id] = SubmissionOutcome.escalating(item)
            elif reservation is not None or fresh:
                outcome = Outcome.of(item.request, decision, item.actor, reservation)
                decided.append((item, outcome, reservation))
            else:
                stale.append(item)
        if arrays is not None and decided:
            committed = await self._commit_batch(session, arrays, decided)
            if committed is None:
                one_by_one += [item for item, _, _ in decided]
            else:
                at, decided = committed
                for item, outcome, _ in decided:
                    settled[item.request.id] = SubmissionOutcome(
                        request_id=item.request.id,
                        created=True,
                        view=replace(outcome, at=at).as_of(item.created_at),
                    )
        if stale:
            self._forget()  # rejections on a cached snapshot are not final
            settled.update(
                await self._give_up([i for i in stale if i.decided + 1 >= self._attempts])
            )
            for item in stale:
                if item.decided + 1 < self._attempts:
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

    async def _nationally_limited(self, requests: Iterable[PlacementRequest]) -> set[str]:
        """The tenants of `requests` that have a national quota: the national brain, which
        holds them to it, places all their requests."""
        async with self._sessions() as session:
            return await tenants.limited_tenants(
                session, (r.tenant for r in requests), national=True
            )

    async def _commit_batch(
        self,
        session: AsyncSession,
        arrays: MapArrays,
        decided: list[tuple[Stored, Outcome, Reservation | None]],
    ) -> tuple[datetime, list[tuple[Stored, Outcome, Reservation | None]]] | None:
        """Commit the batch's decisions in one unit of work (`_commit`); when cohorts refuse
        some of them, once more with those rejected for their reasons. Returns the time
        written and the decisions as written, or None when the batch cannot be settled so
        (each request then goes the one-request way)."""
        for _ in range(2):
            try:
                at = await self._commit(session, arrays, [(o, r) for _, o, r in decided])
            except CohortQuotaExceeded as exceeded:
                refused = exceeded.refusals
                decided = [
                    (item, outcome.refused(refused[item.request.id]), None)
                    if item.request.id in refused
                    else (item, outcome, reservation)
                    for item, outcome, reservation in decided
                ]
                continue
            except (ledger_store.CapacityConflict, ledger_store.QuotaExceeded):
                return None
            except SteeringError as failed:
                log.info("a batch could not be steered (%s); placing one by one", failed)
                return None
            except Exception:
                log.warning("a batch failed to commit; placing one by one", exc_info=True)
                return None
            return at, decided
        return None

    async def place(self, request: PlacementRequest, *, actor: str) -> None:
        """Decide and reserve a stored pending request the one-request way: the batch's
        decision and commit with one item, up to `attempts` times. Leaves it placed or
        rejected (or escalated, and as the national brain answered); one that asks to wait
        joins the queue."""
        if request.start == "queue":
            await self.finish(Outcome.queued(request, actor))
            self._queued()
            return
        if self._national is not None and await self._nationally_limited([request]):
            await self.escalate(request, actor=actor)
            return
        reason = self._gave_up
        for _ in range(self._attempts):
            arrays, [decision], [reservation], fresh = await self._decider.decide([request])
            if self._national is not None and needs_national(request, decision, fresh):
                await self.escalate(request, actor=actor)
                return
            if reservation is None and not fresh:
                self._forget()
                continue
            try:
                async with self._sessions() as session:
                    outcome = Outcome.of(request, decision, actor, reservation)
                    await self._commit(session, arrays, [(outcome, reservation)])
            except ledger_store.CapacityConflict:
                continue
            except ledger_store.QuotaExceeded as exceeded:
                await self.finish(outcome.refused(exceeded.refusal))
                return
            except SteeringError as failed:
                log.warning("request %s rejected: %s", request.id, failed)
                await self.finish(outcome.refused(STEERING_REASON))
                return
            return
        await self.finish(Outcome(request, None, RequestState.REJECTED, reason, actor))

    async def _queue(self, waiting: Sequence[Stored], session: AsyncSession) -> dict[str, Settled]:
        """Move requests that ask to wait into the queue, in one transaction on `session`
        (the batch's); each alone when that fails. By request id, their outcomes."""
        outcomes = [Outcome.queued(item.request, item.actor) for item in waiting]
        try:
            async with session.begin():
                at = await write_outcomes(session, outcomes)
        except Exception:
            log.warning("could not queue a batch; queueing one by one", exc_info=True)
            settled: dict[str, Settled] = {}
            for item, outcome in zip(waiting, outcomes, strict=True):
                try:
                    await self.finish(outcome)
                    settled[item.request.id] = SubmissionOutcome(item.request.id, created=True)
                except Exception as exc:
                    settled[item.request.id] = exc
            self._queued()
            return settled
        self._queued()
        return {
            item.request.id: SubmissionOutcome(
                request_id=item.request.id,
                created=True,
                view=replace(outcome, at=at).as_of(item.created_at),
            )
            for item, outcome in zip(waiting, outcomes, strict=True)
        }

    async def finish(self, outcome: Outcome) -> None:
        """Write one outcome that takes no capacity, in its own transaction."""
        async with self._sessions.begin() as session:
            await write_outcomes(session, [outcome])

    async def escalate(self, request: PlacementRequest, *, actor: str) -> Outcome:
        """Let the national brain place `request` across regions (it reserves in every owner,
        this brain's part included, before it answers) and record its answer: placed or
        rejected. Answers that arrive together are recorded in one transaction."""
        assert self._national is not None
        decision = await self._national.escalate(request)
        return await self.escalation_records.submit(EscalatedAnswer(request, decision, actor))

    async def commit_new(
        self,
        session: AsyncSession,
        arrays: MapArrays,
        new: Sequence[Submission],
        decided: Sequence[tuple[Outcome, Reservation | None]],
    ) -> datetime:
        """Store `new` requests and take and write their `decided` outcomes in one unit of
        work: all of it, or (raising as `_commit` does) none."""
        return await self._commit(session, arrays, decided, new=new)

    async def _commit(
        self,
        session: AsyncSession,
        arrays: MapArrays,
        decided: Sequence[tuple[Outcome, Reservation | None]],
        *,
        new: Sequence[Submission] = (),
    ) -> datetime:
        """One unit of work on `session`'s connection: store the `new` requests as pending
        (their outcomes are among `decided`), take every reservation of `decided` (indices
        into `arrays`), each over its request's duration from now, held to its tenant's
        cohort quota (`cohort_quota.CohortQuotas`), and write every outcome. Returns the time
        written. Raises (after rolling back) CapacityConflict or
        QuotaExceeded (CohortQuotaExceeded for a cohort's) when the sums do not fit, or any
        database error; SteeringError (nothing written) when a path cannot be steered."""
        now_s = int(time.time())
        claims = [
            claim_from(
                r,
                arrays=arrays,
                tenant_id=o.request.tenant,
                window=window_of(start_s=now_s, duration_hours=o.request.duration_hours),
            )
            for o, r in decided
            if r is not None
        ]
        steering = [o.decision for o, r in decided if r is not None and o.decision is not None]
        if self._steered is not None and steering:
            await self._steered.install(steering)
        try:
            async with self._changes.begin(session) as (_, change):
                if new:
                    await insert_submissions(session, new)
                await self._cohorts.reserve(session, claims=claims)
                at = await write_outcomes(session, [o for o, _ in decided])
                for _, reservation in decided:
                    if reservation is not None:
                        change.took(reservation)
        except BaseException:
            if self._steered is not None and steering:
                await self._steered.release([str(d.reservation_id) for d in steering])
            raise
        self._tell_queued(o for o, _ in decided)
        return at

    def _tell_queued(self, outcomes: Iterable[Outcome]) -> None:
        if any(o.state == RequestState.QUEUED for o in outcomes):
            self._queued()

    async def _fail(self, item: Stored, error: Exception) -> SubmissionOutcome | BaseException:
        """What becomes of a stored request whose decision raised `error`: after an outage
        (see `leaves_pending`) it stays pending and `error` is returned; otherwise it ends
        failed, with the reason, in one transaction with its audit entry, and its outcome is
        returned (or the error of that transaction, if it fails too)."""
        if leaves_pending(error):
            return error
        log.error("the decision of request %s failed", item.request.id, exc_info=error)
        reason = f"the brain could not decide this request ({type(error).__name__}); see its log"
        try:
            await self.finish(Outcome(item.request, None, RequestState.FAILED, reason, item.actor))
        except Exception as exc:
            return exc
        return SubmissionOutcome(request_id=item.request.id, created=True)

    async def _give_up(self, stale: Sequence[Stored]) -> dict[str, Settled]:
        """Reject requests still rejected only on cached snapshots after every attempt."""
        reason = self._gave_up
        settled: dict[str, Settled] = {}
        for item in stale:
            try:
                await self.finish(
                    Outcome(item.request, None, RequestState.REJECTED, reason, item.actor)
                )
                settled[item.request.id] = SubmissionOutcome(
                    request_id=item.request.id, created=True
                )
            except Exception as exc:
                settled[item.request.id] = exc
        return settled

    async def _record_escalated(
        self, batch: Sequence[EscalatedAnswer]
    ) -> list[Outcome | BaseException]:
        """The escalation records' group commit: one transaction for the whole batch; if it
        fails (say a request was cancelled meanwhile), each one in its own transaction, so
        only the requests at fault get their error."""
        outcomes = [Outcome.of(e.request, e.decision, e.actor) for e in batch]
        try:
            async with self._sessions.begin() as session:
                at = await write_outcomes(session, outcomes)
            self._tell_queued(outcomes)
            return [replace(o, at=at) for o in outcomes]
        except Exception:
            if len(batch) == 1:
                raise
        results: list[Outcome | BaseException] = []
        for one in outcomes:
            try:
                async with self._sessions.begin() as session:
                    results.append(replace(one, at=await write_outcomes(session, [one])))
                self._tell_queued([one])
            except Exception as exc:
                results.append(exc)
        return results


def needs_national(request: PlacementRequest, decision: Decision, fresh: bool) -> bool:
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


def leaves_pending(error: BaseException) -> bool:
    """Whether a decision that raised `error` leaves its request pending, to be decided again
    (with the next batch, or at the next start): an outage (`outages.outage_of`: the
    database, the cache or the national brain), a database error that another try may not
    meet (a deadlock, a lock not granted in time), or a change another replica made
    meanwhile."""
    return outage_of(error) is not None or isinstance(
        error, OperationalError | InterfaceError | requests.InvalidTransition
    )
