"""The brain's shared fast state: idempotency keys, per-tenant rate limits, capacity events.

`build_cache(url, namespace=...)` gives the three (and `gate`, the rate limit and the claim of
an idempotency key in one round trip) as one `Caches`: Redis when `url` is set
(shared by every replica on that server and namespace), in-process memory when it is None (the
embedded default, one process). The contracts are in `cnbrain.cache.base`.
"""

from cnbrain.cache import redis as backend
from cnbrain.cache.base import (
    PENDING,
    Admission,
    Caches,
    CacheUnavailable,
    CapacityBus,
    CapacityEvent,
    CapacityKind,
    Gate,
    IdempotencyStore,
    RateDecision,
    RateLimiter,
    Subscription,
    channel_name,
)
from cnbrain.cache.follow import Backoff, follow
from cnbrain.cache.memory import (
    MemoryCapacityBus,
    MemoryGate,
    MemoryIdempotencyStore,
    MemoryRateLimiter,
)

__all__ = [
    "PENDING",
    "Admission",
    "Backoff",
    "CacheUnavailable",
    "Caches",
    "CapacityBus",
    "CapacityEvent",
    "CapacityKind",
    "Gate",
    "IdempotencyStore",
    "RateDecision",
    "RateLimiter",
    "Subscription",
    "build_cache",
    "channel_name",
    "follow",
]


def build_cache(url: str | None, *, namespace: str, rate_window_s: float = 60.0) -> Caches:
    """The caches for `url` (a `redis://` or `rediss://` URL) or, when None, in memory.

    Nothing is sent to the server here (call `await caches.ping()` to fail early); a
    malformed URL or namespace raises `ValueError`. `namespace` separates keys and the bus
    channel (`cnbrain:capacity:<namespace>`) of different deployments or test runs on one
    server. `rate_window_s` is the limiter's window (60 s; shorter only in tests).
    """
    if url is None:
        store = MemoryIdempotencyStore()
        limiter = MemoryRateLimiter(window_s=rate_window_s)
        return Caches(
            idempotency=store,
            rate_limiter=limiter,
            bus=MemoryCapacityBus(namespace=namespace),
            gate=MemoryGate(limiter, store),
        )
    client = backend.client_from_url(url)
    safe_url = backend.redact(url)

    async def ping() -> None:
        await backend.ping(client, url)

    subscriber = backend.client_from_url(url, retry_lost_connection=False)

    async def close() -> None:
        await client.aclose()
        await subscriber.aclose()

    redis_store = backend.RedisIdempotencyStore(client, namespace=namespace)
    redis_limiter = backend.RedisRateLimiter(client, namespace=namespace, window_s=rate_window_s)
    return Caches(
        idempotency=redis_store,
        rate_limiter=redis_limiter,
        bus=backend.RedisCapacityBus(client, namespace=namespace, subscriber=subscriber),
        gate=backend.RedisGate(client, limiter=redis_limiter, store=redis_store),
        url=safe_url,
        _ping=ping,
        _close=close,
    )
