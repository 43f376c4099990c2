"""Preempting running work for a request of a higher class: the victims go back to the queue.

In one unit of work, each victim (a runnable request of this brain, chosen by the admission
round) moves back to `queued` with the reason, every reservation it holds in this brain's
ledger is released, its job's attempt under way (if any) is marked preempted
(`jobs.mark_preempted`), and its `preempted` and `queued` events and its audit entry are
written. That attempt is then cancelled on its scheduler by the dispatcher (a request that
is not runnable has its attempt cancelled), and ends `cancelled` with the reason
`preempted`, visible among its attempts; it does not count toward the job's `max_attempts`,
so a job may be preempted any number of times. The
victim waits in the queue like any other request; once admitted again, its next attempt is
queued on the site it is admitted on (`use_cases.admit`).

A victim that is no longer runnable (it ended, or was cancelled meanwhile) is left as it is;
the others are still requeued.
"""

import logging
from collections.abc import Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.events import RequestEvent, RequestEventKind
from cnbrain.domain.states import RequestState
from cnbrain.regional.unit_of_work import CapacityChanges
from cnbrain.storage import audit, jobs, ledger_store, request_events, requests

log = logging.getLogger("cnbrain.regional")


class RequeueVictims:
    """`wake_jobs()` tells the dispatcher to cancel the victims' live attempts; `requeued(n)`
    is told how many victims each call requeued, when any (None: nobody is)."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        changes: CapacityChanges,
        wake_jobs: Callable[[], None],
        requeued: Callable[[int], None] | None = None,
    ) -> None:
        self._sessions = sessions
        self._changes = changes
        self._wake_jobs = wake_jobs
        self._requeued = requeued

    async def __call__(self, victims: Sequence[str], *, preemptor: str, reason: str) -> int:
        """Requeue `victims` for request `preemptor` (module docstring), all in one unit of
        work, or each in its own when one of them cannot go (it is no longer runnable).
        `reason` is what their tenants see (it names no other tenant's request; the audit
        log names the preemptor). Returns how many were requeued."""
        try:
            done = await self._requeue(list(victims), preemptor, reason)
        except requests.InvalidTransition:
            done = 0
            for victim in victims:
                try:
                    done += await self._requeue([victim], preemptor, reason)
                except requests.InvalidTransition:
                    log.info("preemption victim %s is no longer runnable", victim)
        if done:
            self._wake_jobs()
            if self._requeued is not None:
                self._requeued(done)
        return done

    async def _requeue(self, victims: list[str], preemptor: str, reason: str) -> int:
        if not victims:
            return 0
        async with self._changes.begin() as (session, change):
            at = await requests.set_states(
                session,
                [requests.StateChange(v, RequestState.QUEUED, reason=reason) for v in victims],
            )
            for victim in victims:
                for reservation_id in await ledger_store.held_reservations(
                    session, request_id=victim
                ):
                    await ledger_store.release(session, reservation_id=reservation_id)
            await jobs.mark_preempted(session, victims)
            change.free()
            await request_events.append_many(
                session,
                [
                    RequestEvent.of(v, kind, at, reason=reason)
                    for v in victims
                    for kind in (RequestEventKind.PREEMPTED, RequestEventKind.QUEUED)
                ],
            )
            tenants = await requests.tenants_of(session, victims)
            await audit.record_many(
                session,
                [
                    audit.Entry(
                        actor="system",
                        tenant_id=tenants[v],
                        action="request.preempted",
                        object_type="request",
                        object_id=v,
                        detail={"by_request": preemptor, "reason": reason},
                        at=at,
                    )
                    for v in victims
                ],
            )
        return len(victims)
