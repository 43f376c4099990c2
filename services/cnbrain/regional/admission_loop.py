"""The admission loop of a region: one instance at a time plans the queue and admits.

Every instance (replica) of a regional brain runs the loop; only the one holding the
region's admission lease (`storage.leases`, duty `admission`) runs rounds. It renews the
lease before a round once half of it has passed, and rounds run every `interval_s`, or sooner
when woken, but at most one every `MIN_GAP_S`: by `queued` (a request joined the queue, here
or at a replica), or by `wake` (capacity freed or taken, here, by a replica or by a peer),
which starts a round only while the last round found requests waiting. An instance that
stops lets the lease go; one that dies (kill -9) holds it until it lapses (`lease_s`), and
another instance takes over then. A round that overruns the lease is still safe: admission
is a conditional change in the transaction that reserves (`use_cases.admit`).
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.background import finished
from cnbrain.regional.use_cases.admit import RoundReport
from cnbrain.storage import leases
from cnbrain.storage.clock import utcnow

log = logging.getLogger("cnbrain.regional")

LEASE = "admission"
"""The name of the admission loop's lease."""

MIN_GAP_S = 0.2
"""Rounds are at least this far apart, however often the loop is woken."""


class AdmissionLoop:
    """`owner` names this instance in the lease; `round()` runs one admission round;
    `observe(report, seconds)` is told of every round that ran to its end (None: nobody
    is)."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        owner: str,
        interval_s: float,
        lease_s: float,
        observe: Callable[[RoundReport, float], None] | None = None,
    ) -> None:
        self._sessions = sessions
        self._observe = observe
        self._owner = owner
        self._interval_s = interval_s
        self._lease_s = lease_s
        self._woken = asyncio.Event()
        self.holding = False
        """Whether this instance held the lease at its last try."""
        self._renew_at = 0.0
        """When (event-loop time) the lease held is to be renewed."""
        self._waiting = True
        """Whether requests waited at the last round (True until one ran)."""

    def wake(self) -> None:
        """Capacity changed: run a round soon, if requests were waiting at the last one (and
        this instance holds the lease)."""
        if self._waiting:
            self._woken.set()

    def queued(self) -> None:
        """A request joined the queue: run a round soon (if this instance holds the lease)."""
        self._waiting = True
        self._woken.set()

    async def run(self, round: Callable[[], Awaitable[RoundReport]]) -> None:
        """Hold the lease and run rounds until cancelled; then let the lease go. Errors of a
        round (an outage of the database, say) are logged, and the next round tries again."""
        try:
            while True:
                self._woken.clear()
                try:
                    self.holding = await finished(self._hold())
                    if self.holding:
                        started = time.perf_counter()
                        report = await round()
                        if self._observe is not None:
                            self._observe(report, time.perf_counter() - started)
                        self._waiting = report.waiting > 0
                except Exception:
                    if _cancelling():
                        raise asyncio.CancelledError from None
                    log.warning("an admission round failed; trying again", exc_info=True)
                wait = self._interval_s if self.holding else min(self._interval_s, self._lease_s)
                await asyncio.sleep(MIN_GAP_S)
                # Not wait_for: it may swallow a cancellation that comes as the event is set.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._woken.wait()
        finally:
            if self.holding:
                with contextlib.suppress(Exception):
                    async with self._sessions.begin() as session:
                        await leases.let_go(session, name=LEASE, owner=self._owner, now=utcnow())

    async def _hold(self) -> bool:
        """Whether this instance holds the lease: renewed (or taken) once half of it passed."""
        clock = asyncio.get_running_loop().time
        if self.holding and clock() < self._renew_at:
            return True
        asked = clock()
        now = utcnow()
        async with self._sessions.begin() as session:
            held = await leases.hold(
                session,
                name=LEASE,
                owner=self._owner,
                until=now + timedelta(seconds=self._lease_s),
                now=now,
            )
        self._renew_at = asked + self._lease_s / 2
        return held


def _cancelling() -> bool:
    """Whether the running task is being cancelled (an error raised meanwhile, by a driver
    that turned the cancellation into its own error, must not hide it)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
