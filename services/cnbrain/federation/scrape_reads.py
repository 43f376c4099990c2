"""The database reads of a brain's Prometheus scrapes: shared by the scrapes that come close
together, one at a time, and bounded in time.

Some of a brain's metrics are read from its database when it is scraped (the reservations
held; on a regional brain, the queue and the ledger's capacity). `ScrapeReads` makes those
reads at most once per `max_age_s` (about half of Prometheus's scrape interval, so that each
scrape still sees fresh figures, while several Prometheus servers, or a client scraping in a
loop, cost the database one round of reads per interval); a scrape that comes while a round
is under way waits for that round rather than starting another. Each read gets `timeout_s`:
one that takes longer, or that fails with an error `is_outage` takes for the database not
answering, counts as the database being down; the reads after it in that round are skipped,
and what they set keeps its last values. A scrape so never waits on the database longer than
the reads' timeouts.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

log = logging.getLogger("cnbrain.metrics")

Read = Callable[[], Awaitable[None]]
"""One read of the database for a scrape, which sets what it read in the metrics."""


class ScrapeReads:
    """The reads `reads`, in order, as the module docstring says. `clock` gives the
    monotonic time in seconds."""

    def __init__(
        self,
        reads: Sequence[Read],
        *,
        max_age_s: float,
        timeout_s: float,
        is_outage: Callable[[BaseException], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_age_s < 0 or timeout_s <= 0:
            raise ValueError("max_age_s must be at least 0 and timeout_s above 0")
        self._reads = tuple(reads)
        self._max_age_s = max_age_s
        self._timeout_s = timeout_s
        self._is_outage = is_outage
        self._clock = clock
        self._running: asyncio.Future[bool] | None = None
        self._done_at: float | None = None
        self._answered = False
        self.rounds = 0
        """Rounds of reads begun since this object was made."""

    async def refresh(self) -> bool:
        """Bring the reads up to date for a scrape (module docstring): nothing when the last
        round ended less than `max_age_s` ago, else the round under way or a new one. Whether
        the database answered every read of that round. Raises what a read raises that is no
        outage (a bug); the next scrape then reads again."""
        running = self._running
        if running is None:
            if self._done_at is not None and self._clock() - self._done_at < self._max_age_s:
                return self._answered
            running = self._running = asyncio.ensure_future(self._round())
        return await asyncio.shield(running)

    async def _round(self) -> bool:
        self.rounds += 1
        try:
            answered = await self._read_all()
        finally:
            self._running = None
        self._answered = answered
        self._done_at = self._clock()
        return answered

    async def _read_all(self) -> bool:
        for read in self._reads:
            try:
                async with asyncio.timeout(self._timeout_s):
                    await read()
            except TimeoutError:
                log.warning(
                    "metrics: the database did not answer within %g s; last values served",
                    self._timeout_s,
                )
                return False
            except Exception as exc:
                if not self._is_outage(exc):
                    raise
                log.warning("metrics: the database did not answer (%r); last values served", exc)
                return False
        return True
