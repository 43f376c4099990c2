"""One behavioural suite for both cache backends: in memory and on the real Redis server."""

import asyncio
import signal
import time
import uuid
from collections.abc import Awaitable, Callable

import pytest
from redis.asyncio import Redis

from cnbrain.cache import (
    PENDING,
    Backoff,
    Caches,
    CacheUnavailable,
    CapacityEvent,
    Subscription,
    build_cache,
    channel_name,
    follow,
)
from cnbrain.cache.follow import MAX_DELAY_S
from cnbrain.cache.redis import connect, redact
from tests.outages import private_redis
from tests.polling import wait_until

pytestmark = pytest.mark.asyncio

# The factory fixtures of conftest.py: `await make(namespace=None, *, rate_window_s=60.0)`.
MakeCaches = Callable[..., Awaitable[Caches]]


def new_namespace() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


WAIT_S = 2.0


# --- idempotency -------------------------------------------------------------------------------


async def test_claim_is_exclusive_under_50_concurrent_claimers(caches: Caches) -> None:
    answers = await asyncio.gather(
        *(caches.idempotency.claim(tenant_id="t1", key="k", ttl_s=60) for _ in range(50))
    )
    assert answers.count(None) == 1
    assert [a for a in answers if a is not None] == [PENDING] * 49


async def test_complete_makes_claim_return_the_request_id(caches: Caches) -> None:
    store = caches.idempotency
    assert await store.claim(tenant_id="t1", key="k", ttl_s=60) is None
    assert await store.claim(tenant_id="t1", key="k", ttl_s=60) == PENDING
    await store.complete(tenant_id="t1", key="k", request_id="req-1", ttl_s=60)
    assert await store.claim(tenant_id="t1", key="k", ttl_s=60) == "req-1"
    # Another tenant's identical key, and keys that would collide if joined naively, are free.
    assert await store.claim(tenant_id="t2", key="k", ttl_s=60) is None
    assert await store.claim(tenant_id="a:b", key="c", ttl_s=60) is None
    assert await store.claim(tenant_id="a", key="b:c", ttl_s=60) is None


async def test_forget_releases_a_pending_claim_but_not_a_completed_one(caches: Caches) -> None:
    store = caches.idempotency
    await store.forget(tenant_id="t1", key="never-claimed")
    assert await store.claim(tenant_id="t1", key="k", ttl_s=60) is None
    await store.forget(tenant_id="t1", key="k")
    assert await store.claim(tenant_id="t1", key="k", ttl_s=60) is None
    await store.complete(tenant_id="t1", key="k", request_id="req-1", ttl_s=60)
    await store.forget(tenant_id="t1", key="k")
    assert await store.claim(tenant_id="t1", key="k", ttl_s=60) == "req-1"


async def test_an_abandoned_claim_expires(caches: Caches) -> None:
    store = caches.idempotency
    assert await store.claim(tenant_id="t1", key="k", ttl_s=1) is None
    await asyncio.sleep(1.1)
    assert await store.claim(tenant_id="t1", key="k", ttl_s=60) is None


async def test_idempotency_rejects_bad_arguments(caches: Caches) -> None:
    store = caches.idempotency
    with pytest.raises(ValueError, match="ttl_s"):
        await store.claim(tenant_id="t1", key="k", ttl_s=0)
    with pytest.raises(ValueError, match="request_id"):
        await store.complete(tenant_id="t1", key="k", request_id=PENDING, ttl_s=60)


# --- rate limits -------------------------------------------------------------------------------


async def test_rate_limit_allows_exactly_limit_then_refuses_per_tenant(caches: Caches) -> None:
    limiter = caches.rate_limiter
    decisions = [await limiter.hit(tenant_id="t1", limit_per_minute=5) for _ in range(5)]
    assert [d.allowed for d in decisions] == [True] * 5
    assert [d.remaining for d in decisions] == [4, 3, 2, 1, 0]
    assert all(d.retry_after_s == 0.0 for d in decisions)
    refused = await limiter.hit(tenant_id="t1", limit_per_minute=5)
    assert not refused.allowed
    assert refused.remaining == 0
    assert 0 < refused.retry_after_s <= 60
    # Another tenant has its own window.
    other = await limiter.hit(tenant_id="t2", limit_per_minute=5)
    assert other.allowed
    assert other.remaining == 4
    assert not (await limiter.hit(tenant_id="t1", limit_per_minute=5)).allowed


async def test_rate_limit_is_atomic_under_concurrent_hits(caches: Caches) -> None:
    decisions = await asyncio.gather(
        *(caches.rate_limiter.hit(tenant_id="t1", limit_per_minute=10) for _ in range(40))
    )
    assert sum(d.allowed for d in decisions) == 10
    assert sorted(d.remaining for d in decisions if d.allowed) == list(range(10))


async def test_rate_limit_window_slides(make_caches: MakeCaches) -> None:
    limiter = (await make_caches(rate_window_s=0.4)).rate_limiter
    assert (await limiter.hit(tenant_id="t1", limit_per_minute=2)).allowed
    assert (await limiter.hit(tenant_id="t1", limit_per_minute=2)).allowed
    refused = await limiter.hit(tenant_id="t1", limit_per_minute=2)
    assert not refused.allowed
    assert 0 < refused.retry_after_s <= 0.4
    await asyncio.sleep(refused.retry_after_s + 0.05)
    assert (await limiter.hit(tenant_id="t1", limit_per_minute=2)).allowed


async def test_rate_limit_rejects_a_limit_below_one(caches: Caches) -> None:
    with pytest.raises(ValueError, match="limit_per_minute"):
        await caches.rate_limiter.hit(tenant_id="t1", limit_per_minute=0)


# --- the gate: rate limit and idempotency claim in one round trip ------------------------------


async def test_gate_claims_the_key_only_when_the_hit_is_allowed(caches: Caches) -> None:
    gate, store = caches.gate, caches.idempotency

    async def admit(key: str | None, limit: int = 2) -> tuple[bool, str | None]:
        answer = await gate.admit(
            rate_key="t1", limit_per_minute=limit, tenant_id="t1", idempotency_key=key, ttl_s=60
        )
        return answer.rate.allowed, answer.earlier

    assert await admit("k1") == (True, None)
    assert await admit("k1") == (True, PENDING)
    assert await admit("k2") == (False, None)  # the third hit of 2 per minute claims nothing
    assert await store.claim(tenant_id="t1", key="k2", ttl_s=60) is None
    await store.complete(tenant_id="t1", key="k1", request_id="req-1", ttl_s=60)
    assert await admit("k1", limit=10) == (True, "req-1")
    assert await admit(None, limit=10) == (True, None)
    # The gate counts in the rate limiter's own window: 4 allowed hits so far (refused hits
    # do not count), so a fifth fills a window of 5.
    decision = await caches.rate_limiter.hit(tenant_id="t1", limit_per_minute=5)
    assert decision.allowed and decision.remaining == 0
    refused = await gate.admit(
        rate_key="t1", limit_per_minute=5, tenant_id="t1", idempotency_key="k3", ttl_s=60
    )
    assert not refused.rate.allowed and refused.rate.retry_after_s > 0
    # Rate keys and tenants are independent: another tenant's key k1 is free.
    other = await gate.admit(
        rate_key="t2", limit_per_minute=1, tenant_id="t2", idempotency_key="k1", ttl_s=60
    )
    assert other.rate.allowed and other.earlier is None


async def test_gate_claims_are_exclusive_under_50_concurrent_callers(caches: Caches) -> None:
    answers = await asyncio.gather(
        *(
            caches.gate.admit(
                rate_key="t1", limit_per_minute=1000, tenant_id="t1", idempotency_key="k", ttl_s=60
            )
            for _ in range(50)
        )
    )
    assert all(a.rate.allowed for a in answers)
    assert [a.earlier for a in answers].count(None) == 1
    assert {a.earlier for a in answers} == {None, PENDING}


async def test_gate_rejects_bad_arguments(caches: Caches) -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        await caches.gate.admit(
            rate_key="t1", limit_per_minute=5, tenant_id="t1", idempotency_key="k", ttl_s=0
        )
    with pytest.raises(ValueError, match="limit_per_minute"):
        await caches.gate.admit(
            rate_key="t1", limit_per_minute=0, tenant_id="t1", idempotency_key=None, ttl_s=60
        )


async def test_complete_many_answers_every_key_at_once(caches: Caches) -> None:
    store = caches.idempotency
    for key in ("a", "b"):
        assert await store.claim(tenant_id="t1", key=key, ttl_s=60) is None
    with pytest.raises(ValueError, match="request_id"):
        await store.complete_many([("t1", "a", "req-a"), ("t1", "b", PENDING)], ttl_s=60)
    assert await store.claim(tenant_id="t1", key="a", ttl_s=60) == PENDING  # nothing stored
    await store.complete_many([], ttl_s=60)
    await store.complete_many([("t1", "a", "req-a"), ("t2", "b", "req-b")], ttl_s=60)
    assert await store.claim(tenant_id="t1", key="a", ttl_s=60) == "req-a"
    assert await store.claim(tenant_id="t2", key="b", ttl_s=60) == "req-b"
    assert await store.claim(tenant_id="t1", key="b", ttl_s=60) == PENDING
    with pytest.raises(ValueError, match="ttl_s"):
        await store.complete_many([("t1", "c", "req-c")], ttl_s=0)


# --- capacity bus ------------------------------------------------------------------------------


def event(origin: str = "brain-a", **fields: object) -> CapacityEvent:
    return CapacityEvent.model_validate({"kind": "capacity", "origin": origin, **fields})


async def test_two_subscribers_both_receive_a_published_event(caches: Caches) -> None:
    sent = event(version=7, site_ids=("AA-dc",), link_ids=("AA-gw|BB-gw",))
    async with caches.bus.subscribe() as first, caches.bus.subscribe() as second:
        await caches.bus.publish(sent)
        got = await asyncio.gather(
            asyncio.wait_for(anext(first), WAIT_S), asyncio.wait_for(anext(second), WAIT_S)
        )
    assert list(got) == [sent, sent]
    assert got[0].at == sent.at


async def test_events_of_another_namespace_are_not_received(
    make_caches: MakeCaches,
) -> None:
    ours = await make_caches()
    theirs = await make_caches(new_namespace())
    async with ours.bus.subscribe() as events:
        await theirs.bus.publish(event(origin="theirs"))
        await ours.bus.publish(event(origin="ours"))
        assert (await asyncio.wait_for(anext(events), WAIT_S)).origin == "ours"
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(events), 0.2)


async def test_bare_iteration_subscribes_and_aclose_ends_it(caches: Caches) -> None:
    events = caches.bus.subscribe()
    received: list[CapacityEvent] = []

    async def consume() -> None:
        async for e in events:
            received.append(e)

    consumer = asyncio.create_task(consume())
    sent = event(kind="map")
    for _ in range(100):  # bare iteration becomes active on its first __anext__
        await caches.bus.publish(sent)
        await asyncio.sleep(0.01)
        if received:
            break
    await events.aclose()
    await asyncio.wait_for(consumer, WAIT_S)
    assert received
    assert received[0] == sent


async def test_a_subscriber_cancelled_while_it_subscribes_ends(caches: Caches) -> None:
    """However early its task is cancelled (a brain stopped right after it started), a
    subscriber ends instead of waiting for events forever."""
    for i in range(40):
        events = caches.bus.subscribe()

        async def consume(events: Subscription = events) -> None:
            async for _ in events:
                pass

        consumer = asyncio.create_task(consume())
        await asyncio.sleep(0.0005 * (i % 20))
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(consumer, WAIT_S)
        await events.aclose()


async def test_redis_bus_skips_malformed_messages(
    make_redis_caches: MakeCaches, redis_url: str
) -> None:
    # Only a shared channel can carry another writer's bytes.
    namespace = new_namespace()
    caches = await make_redis_caches(namespace)
    raw = Redis.from_url(redis_url)
    sent = event()
    try:
        async with caches.bus.subscribe() as events:
            await raw.publish(channel_name(namespace), b"not json")
            await caches.bus.publish(sent)
            assert await asyncio.wait_for(anext(events), WAIT_S) == sent
    finally:
        await raw.aclose()


async def test_follow_hands_over_events_and_resyncs_only_after_a_failure(caches: Caches) -> None:
    heard: list[CapacityEvent] = []
    resyncs: list[float] = []

    async def on_event(e: CapacityEvent) -> None:
        heard.append(e)

    async def resync() -> None:
        resyncs.append(1.0)

    follower = asyncio.create_task(follow(caches.bus, on_event=on_event, resync=resync))
    try:
        sent = event()
        for _ in range(100):  # the follower's subscription becomes active in its own task
            await caches.bus.publish(sent)
            await asyncio.sleep(0.02)
            if heard:
                break
        assert heard[0] == sent
        assert resyncs == []
    finally:
        follower.cancel()
        with pytest.raises(asyncio.CancelledError):
            await follower


async def test_follow_resubscribes_after_a_handler_fails_and_resyncs_first(
    caches: Caches,
) -> None:
    heard: list[CapacityEvent] = []
    resyncs: list[int] = []

    async def on_event(e: CapacityEvent) -> None:
        heard.append(e)
        if len(heard) == 1:
            raise RuntimeError("the handler failed")

    async def resync() -> None:
        resyncs.append(len(heard))

    backoff = Backoff(first_s=0.01, max_s=0.05)
    follower = asyncio.create_task(
        follow(caches.bus, on_event=on_event, resync=resync, backoff=backoff)
    )
    try:
        for _ in range(200):
            await caches.bus.publish(event())
            await asyncio.sleep(0.02)
            if len(heard) >= 2:
                break
        assert len(heard) >= 2
        assert resyncs[0] == 1  # after the failed event, before the next one
    finally:
        follower.cancel()
        with pytest.raises(asyncio.CancelledError):
            await follower


async def test_backoff_doubles_with_jitter_up_to_its_cap_and_resets() -> None:
    backoff = Backoff(first_s=0.1, max_s=1.0)
    for ceiling in (0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0):
        assert ceiling / 2 <= backoff.next_delay() <= ceiling
    backoff.reset()
    assert 0.05 <= backoff.next_delay() <= 0.1
    with pytest.raises(ValueError):
        Backoff(first_s=2.0, max_s=1.0)


async def test_a_redis_subscription_ends_when_its_server_stops() -> None:
    with private_redis() as server:
        caches = build_cache(server.url, namespace=new_namespace())
        try:
            async with caches.bus.subscribe() as events:
                waiting = asyncio.create_task(anext(events))
                await asyncio.sleep(0.1)
                server.stop(signal.SIGKILL)
                with pytest.raises(CacheUnavailable):
                    await asyncio.wait_for(waiting, WAIT_S)
            with pytest.raises(CacheUnavailable):
                await caches.bus.publish(event())
            with pytest.raises(CacheUnavailable):
                async with caches.bus.subscribe():
                    pass
        finally:
            await caches.aclose()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
async def test_follow_resubscribes_and_resyncs_after_a_redis_restart(sig: signal.Signals) -> None:
    namespace = new_namespace()
    with private_redis() as server:
        follower_caches = build_cache(server.url, namespace=namespace)
        publisher = build_cache(server.url, namespace=namespace)
        heard: list[CapacityEvent] = []
        resyncs: list[float] = []

        async def on_event(e: CapacityEvent) -> None:
            heard.append(e)

        async def resync() -> None:
            resyncs.append(time.monotonic())

        follower = asyncio.create_task(
            follow(follower_caches.bus, on_event=on_event, resync=resync)
        )
        channel = channel_name(namespace)
        try:
            await wait_until(lambda: server.subscribers(channel) == 1, WAIT_S)
            await publisher.bus.publish(event(origin="before"))
            await wait_until(lambda: bool(heard), WAIT_S)
            server.stop(sig)
            await asyncio.sleep(0.5)  # down for a while: the follower's attempts fail
            server.start()
            back = time.monotonic()
            # The server counts the subscriber a moment before `follow` resyncs: wait for both.
            await wait_until(
                lambda: server.subscribers(channel) == 1 and bool(resyncs), MAX_DELAY_S + WAIT_S
            )
            assert resyncs[0] >= back - 0.1
            assert time.monotonic() - back <= MAX_DELAY_S + WAIT_S
            # The publisher's pooled connection died with the server: the first publish after
            # the restart goes out on a new one.
            await publisher.bus.publish(event(origin="after"))
            await wait_until(lambda: heard[-1].origin == "after", WAIT_S)
        finally:
            follower.cancel()
            with pytest.raises(asyncio.CancelledError):
                await follower
            await follower_caches.aclose()
            await publisher.aclose()


# --- connecting --------------------------------------------------------------------------------


async def test_connect_names_the_url_when_redis_is_unreachable() -> None:
    with pytest.raises(CacheUnavailable, match=r"redis://:\*\*\*@127\.0\.0\.1:1/0"):
        await connect("redis://:secret@127.0.0.1:1/0")


async def test_redact_hides_only_the_password() -> None:
    assert redact("redis://user:pw@host:6379/1") == "redis://user:***@host:6379/1"
    assert redact("redis://host:6379/1") == "redis://host:6379/1"
