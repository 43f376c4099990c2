"""Following a `CapacityBus` across outages of its server: resubscribe with backoff, resync.

A subscription ends with `CacheUnavailable` when its server is lost (see `Subscription`), and
the events published until a new one is active are never delivered. `follow` hides that from
a subscriber: it subscribes again after a capped, jittered backoff, and before the first event
of the new subscription calls the subscriber's `resync`, which must refresh everything it
derives from events (it may have missed some).
"""

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import NoReturn

from cnbrain.cache.base import CapacityBus, CapacityEvent

log = logging.getLogger(__name__)

FIRST_DELAY_S = 0.1
"""The wait before the first attempt to subscribe again."""

MAX_DELAY_S = 5.0
"""No wait between attempts is longer than this."""


class Backoff:
    """Capped exponential backoff with jitter: the n-th `next_delay()` is drawn from
    [d/2, d] with d = min(first_s * 2**(n-1), max_s); `reset()` starts again at n = 1."""

    def __init__(self, *, first_s: float = FIRST_DELAY_S, max_s: float = MAX_DELAY_S) -> None:
        if not 0 < first_s <= max_s:
            raise ValueError(f"need 0 < first_s <= max_s, got {first_s} and {max_s}")
        self.first_s = first_s
        self.max_s = max_s
        self._attempt = 0

    def next_delay(self) -> float:
        """The seconds to wait before the next attempt (at most `max_s`)."""
        ceiling = min(self.first_s * 2.0**self._attempt, self.max_s)
        self._attempt = min(self._attempt + 1, 64)
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        """The last attempt succeeded: the next delay is a first one again."""
        self._attempt = 0


async def follow(
    bus: CapacityBus,
    *,
    on_event: Callable[[CapacityEvent], Awaitable[None]],
    resync: Callable[[], Awaitable[None]],
    backoff: Backoff | None = None,
) -> NoReturn:
    """Give every event of `bus` to `on_event` until cancelled, across outages.

    When subscribing fails, the subscription is lost, or `on_event` or `resync` raises, it
    logs a warning, waits `backoff.next_delay()` and subscribes again; once the new
    subscription is active it awaits `resync()` before the next event. The first subscription
    calls `resync` only if an attempt failed before it. The backoff is reset once a
    subscription is active and resynced, so after an outage a new subscription is active at
    most `backoff.max_s` (plus the time to connect) after the server is back.
    """
    backoff = backoff or Backoff()
    missed = False
    while True:
        try:
            async with bus.subscribe() as events:
                if missed:
                    await resync()
                    log.info("capacity bus: subscribed again and resynced")
                missed = False
                backoff.reset()
                async for event in events:
                    await on_event(event)
            raise RuntimeError("the subscription ended while it was followed")
        except Exception as exc:  # every failure means: subscribe again
            missed = True
            delay = backoff.next_delay()
            log.warning("capacity bus: %s; subscribing again in %.2f s", exc, delay)
        await asyncio.sleep(delay)
