"""Submitting a request: admitted, checked, stored, decided and reserved.

A submission passes the gate (the tenant's rate limit and the claim of its idempotency key,
one round trip to the cache) and is checked against the map; then it joins the brain's
group commit (`cnbrain.group_commit`), which settles the submissions waiting together:

1. One transaction stores all of them as `pending` (with their audit entries and events), so
   an accepted request is never lost: a brain that stops before step 3 commits leaves them
   pending, and decides them when it starts again (`recover`).
2. The engine decides them together on the brain's snapshot (`Decider`: requests of one
   batch never count on the same capacity).
3. One unit of work takes every reservation with `ledger_store.reserve_many` (the sums per
   site, accelerator pool, link and tenant quota, by conditional updates), holds those of
   tenants in a cohort to the cohort's quota (`cohort_quota.reserve_within_cohorts`: one
   query for the batch's cohorts, and the check under the members' quota-row locks), and
   writes every outcome: the requests move to `placed` or `rejected`. Rejections on a cached
   snapshot are not final: those requests are decided again on a fresh one.

Whenever the batch cannot be settled so (another replica took capacity the snapshot showed
free, a quota or a cohort's quota would be exceeded, the engine or the database failed on
the batch), it rolls back and each request of the batch goes the one-request way instead
(`Placer.place`): up to `placement_attempts` times, the same decision and unit of work with
one item; on a conflict, refresh the snapshot and decide again. So correctness never depends
on the batch; the batch only saves statements and round trips.

Each caller gets its own answer, built from what was written (no read-back), except after the
one-request way, which reads the request back.
"""

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.cache.base import PENDING, Caches
from cnbrain.domain.decision import Decision
from cnbrain.domain.errors import Exhausted, Invalid
from cnbrain.domain.request import PlacementRequest
from cnbrain.group_commit import Again, GroupCommit
from cnbrain.regional.schemas import RequestView
from cnbrain.regional.security import Principal
from cnbrain.regional.settings import Settings
from cnbrain.regional.use_cases.intake import Intake
from cnbrain.regional.use_cases.new_requests import Submission, insert_submissions
from cnbrain.regional.use_cases.placing import Placer, Stored, SubmissionOutcome
from cnbrain.regional.use_cases.read import ReadRequests
from cnbrain.storage import requests

log = logging.getLogger("cnbrain.regional")


Item = Submission | Stored
"""What the group commit settles: a new submission, or a stored request to decide again."""

Decided = Callable[[str, Decision | None, float], None]
"""Told of every new request decided: its state, its decision, and the seconds it took."""


class SubmitRequest:
    """`decided` is told of every new request this takes (None: nobody is)."""

    def __init__(
        self,
        *,
        settings: Settings,
        caches: Caches,
        sessions: async_sessionmaker[AsyncSession],
        intake: Intake,
        placer: Placer,
        read: ReadRequests,
        decided: Decided | None = None,
    ) -> None:
        self._settings = settings
        self._caches = caches
        self._sessions = sessions
        self._intake = intake
        self._placer = placer
        self._read = read
        self._decided = decided
        self.group_commit: GroupCommit[Item, SubmissionOutcome] = GroupCommit(self._settle)
        """The brain's group commit of submissions."""

    async def __call__(
        self, principal: Principal, body: dict[str, Any], *, idempotency_key: str | None
    ) -> tuple[RequestView, bool]:
        """Admit, check, store, decide and reserve. Returns the request and whether it is new
        (False when the idempotency key names an earlier submission of the same request, which
        is returned as it stands). Raises Exhausted (rate limit), Forbidden or Invalid, and
        stores nothing then; Invalid also when the key names an earlier submission of another
        request."""
        started = time.perf_counter()
        view, created = await self._submit(principal, body, idempotency_key=idempotency_key)
        if created and self._decided is not None:
            self._decided(view.state, view.decision, time.perf_counter() - started)
        return view, created

    async def _submit(
        self, principal: Principal, body: dict[str, Any], *, idempotency_key: str | None
    ) -> tuple[RequestView, bool]:
        settings, caches = self._settings, self._caches
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
            request = await self._intake.checked(principal, body)
        except BaseException:
            if claimed and idempotency_key and claim_tenant:
                await caches.idempotency.forget(tenant_id=claim_tenant, key=idempotency_key)
            raise
        if idempotency_key and not claim_tenant:  # staff: the tenant is known only now
            earlier = await caches.idempotency.claim(
                tenant_id=request.tenant, key=idempotency_key, ttl_s=ttl
            )
        if earlier is not None and earlier != PENDING:
            return _replay(await self._read.one(principal, earlier), request), False
        outcome = await self.group_commit.submit(
            Submission(
                request=request,
                user_id=principal.user_id,
                idempotency_key=idempotency_key,
                body=requests.JsonText(request.model_dump_json()),
            )
        )
        if outcome.escalate:
            written = await self._placer.escalate(request, actor=principal.user_id)
            assert outcome.created_at is not None
            return written.as_of(outcome.created_at), True
        view = outcome.view
        if view is None:
            view = await self._read.one(principal, outcome.request_id)
        return (view, True) if outcome.created else (_replay(view, request), False)

    async def _settle(
        self, batch: Sequence[Item]
    ) -> list[SubmissionOutcome | BaseException | Again[Item]]:
        """The group commit's work: store the new submissions of `batch` as pending in one
        transaction, then decide and reserve them with the stored requests of `batch` (see the
        module docstring). One outcome, exception or `Again` (decide once more, with the next
        batch) per item."""
        async with self._sessions() as session:  # one connection for the whole batch
            stored, early = await self._store(
                session, [s for s in batch if isinstance(s, Submission)]
            )
            settled = await self._placer.place_stored(
                [s for s in batch if isinstance(s, Stored)] + stored, session
            )
        answers = [
            (item.request.tenant, item.idempotency_key, item.request.id)
            for item in (*stored, *(s for s in batch if isinstance(s, Stored)))
            if item.idempotency_key and isinstance(settled[item.request.id], SubmissionOutcome)
        ]
        if answers:
            try:
                await self._caches.idempotency.complete_many(
                    answers, ttl_s=self._settings.idempotency_ttl_s
                )
            except Exception:  # the database's unique key keeps the promise without the cache
                log.warning("could not remember %d idempotency keys", len(answers), exc_info=True)
        results: list[SubmissionOutcome | BaseException | Again[Item]] = []
        for item in batch:
            result = early.get(item.request.id) or settled[item.request.id]
            results.append(Again(result) if isinstance(result, Stored) else result)
        return results

    async def _store(
        self, session: AsyncSession, submissions: Sequence[Submission]
    ) -> tuple[list[Stored], dict[str, SubmissionOutcome | BaseException]]:
        """Store `submissions` as pending in one transaction. Returns the stored ones, and the
        answers of the others by request id: the earlier request holding an idempotency key,
        or (when the batch cannot be stored together) each one's outcome the one-request way."""
        if not submissions:
            return [], {}
        try:
            async with session.begin():
                new, earlier = await insert_submissions(session, submissions)
        except requests.RequestStoreError:
            # One of them cannot be stored (say, its user was removed meanwhile): each alone.
            return [], {s.request.id: await self._submit_alone(s) for s in submissions}
        stored = [
            Stored(
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
            async with self._sessions.begin() as session:
                _, [earlier] = await insert_submissions(session, [submission])
        except Exception as exc:
            return exc
        if earlier is not None:
            return SubmissionOutcome(request_id=earlier, created=False)
        try:
            await self._placer.place(request, actor=submission.user_id)
        except Exception as exc:
            return exc
        if submission.idempotency_key:
            try:
                await self._caches.idempotency.complete(
                    tenant_id=request.tenant,
                    key=submission.idempotency_key,
                    request_id=request.id,
                    ttl_s=self._settings.idempotency_ttl_s,
                )
            except Exception:  # the database's unique key keeps the promise without the cache
                log.warning("could not remember idempotency key of %s", request.id, exc_info=True)
        return SubmissionOutcome(request_id=request.id, created=True)


def too_many(limit_per_minute: int, retry_after_s: float) -> Exhausted:
    """The error of a tenant over its rate limit."""
    return Exhausted(
        f"rate limit of {limit_per_minute} per minute reached", retry_after_s=retry_after_s
    )


def _replay(earlier: RequestView, request: PlacementRequest) -> RequestView:
    """`earlier`, the request that holds an idempotency key, if it is `request` (the same
    request as parsed, whatever its id); else Invalid naming the header. An earlier
    request whose stored body no longer validates (`request` None) is never the same."""
    stored = earlier.request
    if stored is None or stored.model_dump(exclude={"id"}) != request.model_dump(exclude={"id"}):
        raise Invalid(
            f"already used for request {earlier.id!r}, which differs from this one; "
            "use a new key for a new request",
            field="Idempotency-Key",
        )
    return earlier
