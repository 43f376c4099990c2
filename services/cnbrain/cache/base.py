"""The contracts of the brain's shared fast state: idempotency keys, rate limits, capacity events.

Each contract has an in-process implementation (`cnbrain.cache.memory`, for one process) and a
Redis one (`cnbrain.cache.redis`, shared by every replica that uses the same server and
namespace). Both honour the same behaviour; `tests/cache` runs one suite against both.
"""

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Literal, Protocol, Self, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from cnbrain.domain.errors import Unavailable

PENDING = "pending"
"""Value `IdempotencyStore.claim` returns while another caller holds a key and has not finished."""

CHANNEL_PREFIX = "cnbrain:capacity:"
"""A capacity bus in namespace `ns` publishes on the channel `cnbrain:capacity:<ns>`."""


class CacheUnavailable(Unavailable, RuntimeError):  # noqa: N818 - the name the callers use
    """The cache server cannot be reached; the message names the (password-redacted) URL."""


def validate_namespace(namespace: str) -> str:
    """Return `namespace` if it is usable in key and channel names, else raise `ValueError`.

    A namespace is non-empty, without whitespace or ":", so `cnbrain:<namespace>:...` keys of
    different namespaces can never coincide.
    """
    if not namespace or ":" in namespace or any(ch.isspace() for ch in namespace):
        raise ValueError(f"namespace must be non-empty, without whitespace or ':': {namespace!r}")
    return namespace


def channel_name(namespace: str) -> str:
    """The pub/sub channel of the capacity bus in `namespace`."""
    return CHANNEL_PREFIX + validate_namespace(namespace)


def check_ttl(ttl_s: int) -> None:
    """The `ValueError` of the contracts for `ttl_s < 1`."""
    if ttl_s < 1:
        raise ValueError(f"ttl_s must be >= 1, got {ttl_s}")


def check_request_id(request_id: str) -> None:
    """The `ValueError` of `IdempotencyStore.complete` for an empty or `PENDING` answer."""
    if not request_id or request_id == PENDING:
        raise ValueError(f"request_id must be a real id, got {request_id!r}")


def check_limit(limit_per_minute: int) -> None:
    """The `ValueError` of `RateLimiter.hit` and `Gate.admit` for `limit_per_minute < 1`."""
    if limit_per_minute < 1:
        raise ValueError(f"limit_per_minute must be >= 1, got {limit_per_minute}")


@runtime_checkable
class IdempotencyStore(Protocol):
    """Per-tenant idempotency keys: the first caller of a key wins; the others learn its answer.

    Lifecycle of a key: `claim` (value "pending") -> `complete` (value: the request id), or
    `claim` -> `forget` (the key is free again). Every stored value expires after its `ttl_s`;
    a claim whose holder died therefore frees itself. `ttl_s` of a claim must exceed the time
    its holder needs to create the request, or a second caller may claim it meanwhile.
    Keys of different tenants never collide, whatever characters they contain.
    """

    async def claim(self, *, tenant_id: str, key: str, ttl_s: int) -> str | None:
        """Atomically reserve `key` for `tenant_id` for `ttl_s` seconds.

        Returns None when this caller got the key (it now holds the marker "pending"), else the
        stored value: the request id given to `complete`, or `PENDING` while another caller
        holds the key and has not finished. Exactly one of any number of concurrent callers
        gets None. Raises `ValueError` if `ttl_s < 1`.
        """
        ...

    async def complete(self, *, tenant_id: str, key: str, request_id: str, ttl_s: int) -> None:
        """Store `request_id` as the answer of `key` for `ttl_s` seconds (replacing the claim).

        Later `claim`s of the key return `request_id`. Raises `ValueError` if `ttl_s < 1` or
        `request_id` is `PENDING` or empty.
        """
        ...

    async def complete_many(self, answers: Sequence[tuple[str, str, str]], *, ttl_s: int) -> None:
        """`complete` for each (tenant_id, key, request_id) of `answers`, in one round trip
        (Redis: one pipeline). The same errors as `complete`, raised before anything is
        stored."""
        ...

    async def forget(self, *, tenant_id: str, key: str) -> None:
        """Release a pending claim of `key` whose request was never created.

        A completed key (one that holds a request id) is left alone; forgetting a key that is
        not held does nothing.
        """
        ...


@dataclass(frozen=True, slots=True)
class RateDecision:
    """The answer to one `RateLimiter.hit`.

    `remaining` is how many more hits the window allows after this one (0 when refused);
    `retry_after_s` is 0.0 when allowed, else the seconds until the next hit can succeed (> 0).
    """

    allowed: bool
    remaining: int
    retry_after_s: float


@runtime_checkable
class RateLimiter(Protocol):
    """A per-tenant sliding-window limiter: at most `limit` allowed hits in any window.

    The window is 60 s unless the implementation was built with another `window_s` (tests).
    Refused hits are not counted. Tenants are independent.
    """

    async def hit(self, *, tenant_id: str, limit_per_minute: int) -> RateDecision:
        """Count a hit for `tenant_id` if fewer than `limit_per_minute` were allowed in the window.

        Atomic: of N concurrent hits on a fresh window exactly `min(N, limit)` are allowed.
        Raises `ValueError` if `limit_per_minute < 1`.
        """
        ...


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer to one `Gate.admit`: the rate limiter's decision, and what the idempotency
    claim returned (None: this caller holds the key now, or no key was asked for, or the hit
    was refused and nothing was claimed; else the stored value, see `IdempotencyStore.claim`)."""

    rate: RateDecision
    earlier: str | None


@runtime_checkable
class Gate(Protocol):
    """The two checks at the door of a submission, in one round trip: the tenant's rate limit
    and the claim of its idempotency key. Same keys and semantics as `RateLimiter` and
    `IdempotencyStore` of the same caches, so the three can be mixed."""

    async def admit(
        self,
        *,
        rate_key: str,
        limit_per_minute: int,
        tenant_id: str,
        idempotency_key: str | None,
        ttl_s: int,
    ) -> Admission:
        """`RateLimiter.hit(tenant_id=rate_key, ...)`, then, only when that hit is allowed and
        `idempotency_key` is given, `IdempotencyStore.claim(tenant_id, idempotency_key, ttl_s)`;
        atomic (one Lua script on Redis). A refused hit claims nothing. Raises `ValueError` for
        `limit_per_minute < 1` or `ttl_s < 1`."""
        ...


CapacityKind = Literal["capacity", "map", "queue"]
"""What a `CapacityEvent` says changed: capacity/utilisation of sites and links, the map, or
the admission queue (a request joined it)."""


def _utc_now() -> datetime:
    return datetime.now(UTC)


class CapacityEvent(BaseModel):
    """Something that later decisions must see changed: capacity/utilisation, or the map itself.

    `origin` is the id of the brain instance that published it (a subscriber may skip its own);
    `version` is the origin's state version after the change (0 when it has none), so a
    subscriber can notice gaps; `site_ids` / `link_ids` name what changed (empty: unknown, reload
    all). On the wire it is the JSON of this model.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: CapacityKind
    origin: str = Field(min_length=1)
    version: int = Field(default=0, ge=0)
    at: datetime = Field(default_factory=_utc_now)
    site_ids: tuple[str, ...] = ()
    link_ids: tuple[str, ...] = ()

    def to_json(self) -> str:
        """The wire form."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, data: str | bytes) -> "CapacityEvent":
        """Parse the wire form; raises `pydantic.ValidationError` on anything else."""
        return cls.model_validate_json(data)


class Subscription(Protocol):
    """One open subscription of a `CapacityBus`: an async iterator of events that must be closed.

    Use it as `async with bus.subscribe() as events: async for event in events: ...` (active
    when the body starts; closed on leaving), or iterate `bus.subscribe()` directly and call
    `aclose()` when done. Iteration ends (StopAsyncIteration) once the subscription is closed.

    Across an outage of the server: when the subscription is lost (the server stopped or
    restarted, or dropped a subscriber that fell behind), `__anext__` raises `CacheUnavailable`
    and the subscription is closed; activating one while the server is down raises it too.
    Nothing reconnects silently, and events published until a new subscription is active are
    never delivered to this subscriber, so a subscriber that derives state from events
    subscribes again and then refreshes all of it (`cnbrain.cache.follow` does both). The
    in-process bus has no server and never raises.
    """

    def __aiter__(self) -> Self: ...

    async def __anext__(self) -> CapacityEvent:
        """The next event; waits for one."""
        ...

    async def __aenter__(self) -> Self:
        """Make sure the subscription is active, then return it."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """`aclose()`."""
        ...

    async def aclose(self) -> None:
        """Unsubscribe; idempotent."""
        ...


@runtime_checkable
class CapacityBus(Protocol):
    """Fan-out of `CapacityEvent`s to every subscriber of the same namespace.

    Delivery is at most once and only to subscriptions active when the event is published (no
    history); a subscriber that falls far behind may lose old events (see the implementation).
    The publisher's own subscriptions receive its events too.
    """

    async def publish(self, event: CapacityEvent) -> None:
        """Send `event` to every active subscription of this namespace; `CacheUnavailable`
        when the server cannot be reached (the event is then lost)."""
        ...

    def subscribe(self) -> Subscription:
        """A new subscription (see `Subscription` for when it becomes active)."""
        ...


async def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Caches:
    """The three caches of one brain instance and what closes them.

    `url` is the (password-redacted) Redis URL, or None for memory. `ping()` raises
    `CacheUnavailable` when the backing server does not answer (readiness); `aclose()` releases
    its connections and may be called more than once.
    """

    idempotency: IdempotencyStore
    rate_limiter: RateLimiter
    bus: CapacityBus
    gate: Gate
    url: str | None = None
    _ping: Callable[[], Awaitable[None]] = field(default=_nothing, repr=False)
    _close: Callable[[], Awaitable[None]] = field(default=_nothing, repr=False)

    async def ping(self) -> None:
        """Raise `CacheUnavailable` (naming the URL) if the backing server does not answer."""
        await self._ping()

    async def aclose(self) -> None:
        """Release connections; the caches must not be used afterwards."""
        await self._close()
