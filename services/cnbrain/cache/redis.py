"""Redis implementations of the cache contracts, shared by every replica on one server.

All state lives under keys `cnbrain:<namespace>:...` and the bus uses the channel
`cnbrain:capacity:<namespace>`, so runs with different namespaces (tests, several deployments)
on one server never see each other. Every read-modify-write is one Lua script, hence atomic
across replicas; the rate limiter reads the server's clock, so replicas' clocks do not matter.
The client may be built with or without `decode_responses`.
"""

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

from pydantic import ValidationError
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from cnbrain.cache.base import (
    PENDING,
    Admission,
    CacheUnavailable,
    CapacityEvent,
    RateDecision,
    channel_name,
    check_limit,
    check_request_id,
    check_ttl,
    validate_namespace,
)
from cnbrain.closing import Closing

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0

# KEYS[1] = key; ARGV[1] = pending marker, ARGV[2] = ttl seconds.
# Returns nil when the caller got the key, else the stored value.
_CLAIM = """
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return false
"""

# KEYS[1] = key; ARGV[1] = pending marker. Deletes the key only while it is pending.
_FORGET = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# The hit of a sliding-window log in a sorted set scored by server time in microseconds:
# KEYS[1] = key; ARGV[1] = window us, ARGV[2] = limit, ARGV[3] = unique member. A refused hit
# returns {0, 0, retry_after us}; an allowed one is logged and the script goes on, with
# `limit - count - 1` hits left.
_WINDOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
if count >= limit then
  local oldest = redis.call('ZRANGE', KEYS[1], count - limit, count - limit, 'WITHSCORES')
  return {0, 0, tonumber(oldest[2]) + window - now}
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000))
"""

# `_WINDOW`. Returns {allowed 0/1, remaining, retry_after us}.
_HIT = _WINDOW + "return {1, limit - count - 1, 0}\n"

# `_WINDOW`, then (only when allowed and KEYS[2] is given) `_CLAIM` on KEYS[2].
# KEYS[1] = rate key, KEYS[2] = idempotency key (optional);
# ARGV[1] = window us, ARGV[2] = limit, ARGV[3] = unique member, ARGV[4] = pending marker,
# ARGV[5] = ttl seconds. Returns {allowed 0/1, remaining, retry_after us[, claim answer]}.
_ADMIT = (
    _WINDOW
    + """local earlier = false
if KEYS[2] then
  earlier = redis.call('GET', KEYS[2])
  if not earlier then redis.call('SET', KEYS[2], ARGV[4], 'EX', ARGV[5]) end
end
return {1, limit - count - 1, 0, earlier}
"""
)


def redact(url: str) -> str:
    """`url` with its password replaced by `***`, for messages and logs."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable url>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[-1]}"))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _key_prefix(namespace: str) -> str:
    return f"cnbrain:{validate_namespace(namespace)}:"


def client_from_url(url: str, *, retry_lost_connection: bool = True) -> "Redis":
    """A lazily connecting client for `url` (nothing is sent yet). `ValueError` if malformed.

    With `retry_lost_connection`, a command whose pooled connection turns out to be lost (the
    server restarted since it was last used) is sent once more on a new connection, so the
    first commands after a restart do not fail; a server that is down still fails at once.
    Without it, every lost connection raises (a subscription must learn of each one).
    """
    retry = Retry(NoBackoff(), 1 if retry_lost_connection else 0)
    try:
        return Redis.from_url(
            url,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            retry=retry,
            retry_on_error=[RedisConnectionError],
        )
    except ValueError as exc:
        raise ValueError(f"bad Redis URL {redact(url)}: {exc}") from exc


async def ping(client: "Redis", url: str) -> None:
    """Ping `client`; raise `CacheUnavailable` naming `url` (redacted) if it does not answer."""
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        raise CacheUnavailable(
            f"Redis at {redact(url)} is unreachable ({type(exc).__name__}: {exc})"
        ) from exc


async def connect(url: str) -> "Redis":
    """A client for `url` that has answered a PING.

    Raises `CacheUnavailable` naming the URL (password redacted) when the server cannot be
    reached, and `ValueError` when the URL is malformed. The caller closes it (`aclose()`).
    """
    client = client_from_url(url)
    try:
        await ping(client, url)
    except CacheUnavailable:
        await client.aclose()
        raise
    return client


class RedisIdempotencyStore:
    """`IdempotencyStore` as string keys `cnbrain:<ns>:idem:<len(tenant)>:<tenant>:<key>`."""

    def __init__(self, client: "Redis", *, namespace: str) -> None:
        self._client = client
        self._prefix = _key_prefix(namespace) + "idem:"
        self._claim = client.register_script(_CLAIM)
        self._forget = client.register_script(_FORGET)

    def key(self, tenant_id: str, key: str) -> str:
        """The Redis key of (tenant_id, key)."""
        # The length prefix keeps ("a:b", "c") and ("a", "b:c") apart.
        return f"{self._prefix}{len(tenant_id)}:{tenant_id}:{key}"

    async def claim(self, *, tenant_id: str, key: str, ttl_s: int) -> str | None:
        """See `IdempotencyStore.claim`."""
        check_ttl(ttl_s)
        value = await self._claim(keys=[self.key(tenant_id, key)], args=[PENDING, ttl_s])
        return None if value is None else _text(value)

    async def complete(self, *, tenant_id: str, key: str, request_id: str, ttl_s: int) -> None:
        """See `IdempotencyStore.complete`."""
        check_ttl(ttl_s)
        check_request_id(request_id)
        await self._client.set(self.key(tenant_id, key), request_id, ex=ttl_s)

    async def complete_many(self, answers: Sequence[tuple[str, str, str]], *, ttl_s: int) -> None:
        """See `IdempotencyStore.complete_many`."""
        check_ttl(ttl_s)
        for _, _, request_id in answers:
            check_request_id(request_id)
        if not answers:
            return
        async with self._client.pipeline(transaction=False) as pipe:
            for tenant_id, key, request_id in answers:
                pipe.set(self.key(tenant_id, key), request_id, ex=ttl_s)
            await pipe.execute()

    async def forget(self, *, tenant_id: str, key: str) -> None:
        """See `IdempotencyStore.forget`."""
        await self._forget(keys=[self.key(tenant_id, key)], args=[PENDING])


class RedisRateLimiter:
    """`RateLimiter` as a sliding-window log in sorted sets `cnbrain:<ns>:rate:<tenant>`."""

    def __init__(self, client: "Redis", *, namespace: str, window_s: float = 60.0) -> None:
        if window_s < 0.001:
            raise ValueError(f"window_s must be >= 0.001, got {window_s}")
        self._prefix = _key_prefix(namespace) + "rate:"
        self.window_us = round(window_s * 1_000_000)
        self._hit = client.register_script(_HIT)

    def key(self, tenant_id: str) -> str:
        """The Redis key of `tenant_id`'s window."""
        return self._prefix + tenant_id

    async def hit(self, *, tenant_id: str, limit_per_minute: int) -> RateDecision:
        """See `RateLimiter.hit`."""
        check_limit(limit_per_minute)
        reply: Any = await self._hit(
            keys=[self.key(tenant_id)],
            args=[self.window_us, limit_per_minute, uuid.uuid4().hex],
        )
        return _decision(reply)


class RedisGate:
    """`Gate` as one Lua script over the keys of a `RedisRateLimiter` and a
    `RedisIdempotencyStore` (both keys live on the one server the client talks to)."""

    def __init__(
        self, client: "Redis", *, limiter: RedisRateLimiter, store: RedisIdempotencyStore
    ) -> None:
        self._limiter = limiter
        self._store = store
        self._admit = client.register_script(_ADMIT)

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
        check_limit(limit_per_minute)
        check_ttl(ttl_s)
        keys = [self._limiter.key(rate_key)]
        if idempotency_key is not None:
            keys.append(self._store.key(tenant_id, idempotency_key))
        reply: Any = await self._admit(
            keys=keys,
            args=[self._limiter.window_us, limit_per_minute, uuid.uuid4().hex, PENDING, ttl_s],
        )
        rate = _decision(reply)
        earlier = reply[3] if rate.allowed and len(reply) > 3 else None
        return Admission(rate=rate, earlier=None if earlier is None else _text(earlier))


def _decision(reply: Any) -> RateDecision:
    """The decision of a `_WINDOW` script's reply: {allowed 0/1, remaining, retry_after us,
    ...}."""
    allowed, remaining, retry_us = (int(x) for x in reply[:3])
    if allowed:
        return RateDecision(allowed=True, remaining=remaining, retry_after_s=0.0)
    return RateDecision(allowed=False, remaining=0, retry_after_s=max(retry_us / 1e6, 1e-3))


def _raise_if_cancelled() -> None:
    """Raise CancelledError if this task was asked to stop and is still running: redis-py
    (8.1) can swallow a cancellation while it connects a pub/sub connection, after which a
    subscription would wait for a message forever instead of ending."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class RedisSubscription(Closing):
    """A `Subscription` on one dedicated connection.

    It becomes active on `async with` entry or, when iterated bare, on the first `__anext__`;
    activation waits for the server's confirmation, so an event published afterwards from any
    connection is received. When the connection is lost, it closes itself and `__anext__`
    raises `CacheUnavailable`; so does activation when the server cannot be reached. `client`
    must not retry lost connections (`client_from_url(..., retry_lost_connection=False)`):
    a silent reconnection would hide the events missed meanwhile.
    """

    def __init__(self, client: "Redis", channel: str) -> None:
        self._pubsub: PubSub = client.pubsub()
        self._channel = channel
        self._lock = asyncio.Lock()
        self._active = False
        self.closed = False

    async def _activate(self) -> None:
        async with self._lock:
            if self._active or self.closed:
                return
            try:
                await self._pubsub.subscribe(self._channel)
                _raise_if_cancelled()
                await self._confirmed()
            except (RedisError, OSError, CacheUnavailable) as exc:
                await self.aclose()
                raise CacheUnavailable(f"cannot subscribe to {self._channel}: {exc}") from exc
            self._active = True

    async def _confirmed(self) -> None:
        # Until the server confirms, a PUBLISH from another connection might be missed.
        for _ in range(100):
            message = await self._pubsub.get_message(timeout=CONNECT_TIMEOUT_S)
            _raise_if_cancelled()
            if message is None:
                break
            if message.get("type") == "subscribe":
                return
        raise CacheUnavailable(f"no confirmation of the subscription to {self._channel}")

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> CapacityEvent:
        await self._activate()
        while not self.closed:
            _raise_if_cancelled()
            try:
                message = await self._pubsub.get_message(timeout=None)
            except (RedisError, OSError) as exc:
                if self.closed:
                    break
                await self.aclose()
                raise CacheUnavailable(f"lost the subscription to {self._channel}: {exc}") from exc
            if message is None or message.get("type") != "message":
                continue
            try:
                return CapacityEvent.from_json(message["data"])
            except ValidationError as exc:
                log.warning("ignoring a malformed event on %s: %s", self._channel, exc)
        raise StopAsyncIteration

    async def __aenter__(self) -> Self:
        await self._activate()
        return self

    async def aclose(self) -> None:
        """See `Subscription.aclose`; drops the connection, which ends the subscription."""
        if not self.closed:
            self.closed = True
            await self._pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # unannotated before redis 8.2


class RedisCapacityBus:
    """`CapacityBus` over Redis pub/sub on `cnbrain:capacity:<namespace>`.

    `client` publishes; each subscription holds its own connection of `subscriber` (default:
    `client`), a client that does not retry lost connections (see `RedisSubscription`). Redis
    buffers a slow subscriber's events on the server up to its `client-output-buffer-limit
    pubsub` and then disconnects it: that subscription then ends with `CacheUnavailable`, like
    one whose server restarted (events sent meanwhile are lost, at most once).
    """

    def __init__(
        self, client: "Redis", *, namespace: str, subscriber: "Redis | None" = None
    ) -> None:
        self._client = client
        self._subscriber = subscriber or client
        self.channel = channel_name(namespace)

    async def publish(self, event: CapacityEvent) -> None:
        """See `CapacityBus.publish`; `CacheUnavailable` when the server does not answer."""
        try:
            await self._client.publish(self.channel, event.to_json())
        except (RedisError, OSError) as exc:
            raise CacheUnavailable(f"cannot publish on {self.channel}: {exc}") from exc

    def subscribe(self) -> RedisSubscription:
        """See `CapacityBus.subscribe`."""
        return RedisSubscription(self._subscriber, self.channel)
