"""Deciding the requests a stop left pending, at a start."""

import asyncio
import logging
import random
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.regional.stored_requests import fail_unreadable, stored_request
from cnbrain.regional.use_cases.placing import Placer, Settled, Stored, SubmissionOutcome
from cnbrain.storage import requests

log = logging.getLogger("cnbrain.regional")

RECOVERY_BATCH = 64
"""Pending requests decided together at a start."""


class RecoverPending:
    def __init__(self, *, sessions: async_sessionmaker[AsyncSession], placer: Placer) -> None:
        self._sessions = sessions
        self._placer = placer

    async def __call__(self, *, created_before: datetime) -> int:
        """Decide every request created before `created_before` and left pending by a stop,
        in batches like submissions; returns how many are still pending because of an outage
        (the database, the national brain): the caller tries again later. A request that
        another replica (recovering too) or a cancellation settled meanwhile is left as it is;
        one whose stored form is no longer a valid request (stored by an earlier version) ends
        failed, with the reason; one whose decision fails ends failed too."""
        async with self._sessions() as session:
            pending = await requests.pending_requests(session, created_before=created_before)
        stored: list[Stored] = []
        for record in pending:
            request, problem = stored_request(record.body)
            if request is None:
                await fail_unreadable(self._sessions, record, problem)
            else:
                stored.append(Stored(request, actor="system", created_at=record.created_at))
        left = 0
        for start in range(0, len(stored), RECOVERY_BATCH):
            chunk = stored[start : start + RECOVERY_BATCH]
            while chunk:
                async with self._sessions() as session:
                    settled = await self._placer.place_stored(chunk, session)
                for item in chunk:
                    left += not await self._recovered(item, settled.get(item.request.id))
                chunk = [again for again in settled.values() if isinstance(again, Stored)]
        return left

    async def _recovered(self, item: Stored, outcome: Settled | None) -> bool:
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
                await self._placer.escalate(item.request, actor="system")
            except Exception as exc:
                log.warning("request %s stays pending: the national brain: %s", request_id, exc)
                return False
        return True


RECOVERY_BACKOFF_S = (1.0, 60.0)
"""The first and the longest wait between passes over requests left pending by an outage."""


async def start_recovery(recover: RecoverPending) -> "asyncio.Task[None] | None":
    """Decide the requests an earlier stop left pending, before the brain serves. Those an
    outage keeps pending (the database, the national brain) are tried again in the background
    until none is left; the task is returned (None: nothing left). Never raises: no stored
    request stops a brain from starting."""
    started = datetime.now(UTC)
    try:
        left = await recover(created_before=started)
    except Exception:
        log.exception("could not recover the requests left pending; trying again later")
        left = 1
    if not left:
        return None
    log.warning("requests left pending by an earlier stop are decided in the background")
    return asyncio.create_task(_recover_later(recover, started), name="cnbrain-recovery")


async def _recover_later(recover: RecoverPending, started: datetime) -> None:
    wait, longest = RECOVERY_BACKOFF_S
    while True:
        await asyncio.sleep(wait * random.uniform(0.5, 1.0))
        try:
            if not await recover(created_before=started):
                log.info("every request left pending by an earlier stop is decided")
                return
        except Exception:
            log.warning("recovery of pending requests failed; trying again", exc_info=True)
        wait = min(wait * 2, longest)
