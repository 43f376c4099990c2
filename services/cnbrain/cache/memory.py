"""In-process implementations of the cache contracts, for the embedded default (one process).

They are asyncio-safe because no method awaits between reading and writing its state: each
operation runs to completion within one step of the event loop. They are not shared between
processes or event-loop threads; use `cnbrain.cache.redis` for several replicas.
"""

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Self

from cnbrain.cache.base import (
    PENDING,
    Admission,
    CapacityEvent,
    RateDecision,
    check_limit,
    check_request_id,
    check_ttl,
    validate_namespace,
)
from cnbrain.closing import Closing

Clock = Callable[[], float]


class MemoryIdempotencyStore:
    """`IdempotencyStore` in a dict; expired entries are dropped on access and in sweeps."""

    _SWEEP_EVERY = 1024

    def __init__(self, *, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[tuple[str, str], tuple[str, float]] = {}
        self._ops = 0

    def _live(self, slot: tuple[str, str], now: float) -> str | None:
        entry = self._entries.get(slot)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._entries[slot]
            return None
        return entry[0]

    def _sweep(self, now: float) -> None:
        self._ops += 1
        if self._ops % self._SWEEP_EVERY == 0:
            expired = [slot for slot, (_, until) in self._entries.items() if until <= now]
            for slot in expired:
                del self._entries[slot]

    async def claim(self, *, tenant_id: str, key: str, ttl_s: int) -> str | None:
        """See `IdempotencyStore.claim`."""
        check_ttl(ttl_s)
        now = self._clock()
        self._sweep(now)
        slot = (tenant_id, key)
        current = self._live(slot, now)
        if current is not None:
            return current
        self._entries[slot] = (PENDING, now + ttl_s)
        return None

    async def complete(self, *, tenant_id: str, key: str, request_id: str, ttl_s: int) -> None:
        """See `IdempotencyStore.complete`."""
        check_ttl(ttl_s)
        check_request_id(request_id)
        self._entries[(tenant_id, key)] = (request_id, self._clock() + ttl_s)

    async def complete_many(self, answers: Sequence[tuple[str, str, str]], *, ttl_s: int) -> None:
        """See `IdempotencyStore.complete_many`."""
        check_ttl(ttl_s)
        for _, _, request_id in answers:
            check_request_id(request_id)
        until = self._clock() + ttl_s
        for tenant_id, key, request_id in answers:
            self._entries[(tenant_id, key)] = (request_id, until)

    async def forget(self, *, tenant_id: str, key: str) -> None:
        """See `IdempotencyStore.forget`."""
        slot = (tenant_id, key)
        if self._live(slot, self._clock()) == PENDING:
            del self._entries[slot]


class MemoryRateLimiter:
    """`RateLimiter` as a sliding-window log: the times of the allowed hits, per tenant."""

    def __init__(self, *, window_s: float = 60.0, clock: Clock = time.monotonic) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self._window_s = window_s
        self._clock = clock
        self._hits: dict[str, deque[float]] = {}

    async def hit(self, *, tenant_id: str, limit_per_minute: int) -> RateDecision:
        """See `RateLimiter.hit`."""
        check_limit(limit_per_minute)
        now = self._clock()
        log = self._hits.setdefault(tenant_id, deque())
        while log and log[0] <= now - self._window_s:
            log.popleft()
        if len(log) >= limit_per_minute:
            # The oldest hit that must leave the window before one more fits.
            oldest = log[len(log) - limit_per_minute]
            retry = max(oldest + self._window_s - now, 1e-3)
            return RateDecision(allowed=False, remaining=0, retry_after_s=retry)
        log.append(now)
        return RateDecision(allowed=True, remaining=limit_per_minute - len(log), retry_after_s=0.0)


class MemoryGate:
    """`Gate` over a `MemoryRateLimiter` and a `MemoryIdempotencyStore`: the hit, then the
    claim, with no await between them (so atomic in one event loop)."""

    def __init__(self, limiter: MemoryRateLimiter, store: MemoryIdempotencyStore) -> None:
        self._limiter = limiter
        self._store = store

    async def admit(
        self,
        *,
        rate_key: str,
        limit_per_minute: int,
        tenant_id: str,
        idempotency_key: str | None,
        ttl_s: int,
    ) -> Admission:
        """See `Gate.admit`."""
        check_ttl(ttl_s)
        rate = await self._limiter.hit(tenant_id=rate_key, limit_per_minute=limit_per_minute)
        if not rate.allowed or idempotency_key is None:
            return Admission(rate=rate, earlier=None)
        earlier = await self._store.claim(tenant_id=tenant_id, key=idempotency_key, ttl_s=ttl_s)
        return Admission(rate=rate, earlier=earlier)


class MemorySubscription(Closing):
    """A `Subscription` of a `MemoryCapacityBus`; active from its creation until `aclose()`."""

    def __init__(self, bus: "MemoryCapacityBus", max_backlog: int) -> None:
        self._bus = bus
        # None is the end marker put by `aclose`.
        self._queue: asyncio.Queue[CapacityEvent | None] = asyncio.Queue(maxsize=max_backlog)
        self.closed = False

    def put(self, item: CapacityEvent | None) -> None:
        """Queue `item`, dropping the oldest queued event when the backlog is full."""
        if self._queue.full():
            self._queue.get_nowait()
        self._queue.put_nowait(item)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> CapacityEvent:
        item = None if self.closed else await self._queue.get()
        if item is None:
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        """See `Subscription.aclose`."""
        if not self.closed:
            self.closed = True
            self._bus.detach(self)
            self.put(None)


class MemoryCapacityBus:
    """`CapacityBus` inside one object: every subscription of this object gets every event.

    A subscription is active as soon as `subscribe()` returns. Each has a queue of
    `max_backlog` events; when it is full the oldest event is dropped (events are hints to
    refresh; `CapacityEvent.version` shows the gap).
    """

    def __init__(self, *, namespace: str, max_backlog: int = 1024) -> None:
        if max_backlog < 1:
            raise ValueError(f"max_backlog must be >= 1, got {max_backlog}")
        self.namespace = validate_namespace(namespace)
        self._max_backlog = max_backlog
        self._subscriptions: set[MemorySubscription] = set()

    async def publish(self, event: CapacityEvent) -> None:
        """See `CapacityBus.publish`."""
        for subscription in self._subscriptions:
            subscription.put(event)

    def subscribe(self) -> MemorySubscription:
        """See `CapacityBus.subscribe`."""
        subscription = MemorySubscription(self, self._max_backlog)
        self._subscriptions.add(subscription)
        return subscription

    def detach(self, subscription: MemorySubscription) -> None:
        """Stop delivering to `subscription` (called by its `aclose`)."""
        self._subscriptions.discard(subscription)
