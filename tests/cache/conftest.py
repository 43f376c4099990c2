"""Fixtures that build the same caches in memory and on the real Redis server.

Redis is at `CNBRAIN_TEST_REDIS_URL` (default `redis://127.0.0.1:6379/15`); each test gets its
own namespace, and its keys are deleted afterwards. When Redis does not answer, the Redis
variants FAIL (they are not skipped) with the URL and the command that starts it.
"""

import os
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from redis.asyncio import Redis
from redis.exceptions import RedisError

from cnbrain.cache import Caches, CacheUnavailable, build_cache

REDIS_URL = os.environ.get("CNBRAIN_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
START_HINT = (
    "start it with `bash scripts/services.sh` (which runs `redis-server --daemonize yes "
    '--bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis '
    "--logfile /var/log/redis/ci.log`), or point CNBRAIN_TEST_REDIS_URL at a running server"
)

_redis_down: str | None = None  # set by the first failed ping of this run


def new_namespace() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


class CachesFactory:
    """Builds `Caches` of one backend; remembers them to close them and delete their keys."""

    def __init__(self, backend: str) -> None:
        # Tests import nothing from here (`conftest` is an ambiguous module name): all they
        # need comes through the fixtures below.
        self.backend = backend
        self.url = None if backend == "memory" else REDIS_URL
        self._made: list[tuple[str, Caches]] = []

    async def __call__(
        self, namespace: str | None = None, *, rate_window_s: float = 60.0
    ) -> Caches:
        namespace = namespace or new_namespace()
        caches = build_cache(self.url, namespace=namespace, rate_window_s=rate_window_s)
        self._made.append((namespace, caches))
        if self.url is not None:
            global _redis_down
            if _redis_down is None:
                try:
                    await caches.ping()
                except CacheUnavailable as exc:
                    _redis_down = f"Redis is required for these tests: {exc}; {START_HINT}"
            if _redis_down is not None:  # fail fast (no connect timeout per test) after the first
                pytest.fail(_redis_down, pytrace=False)
        return caches

    async def cleanup(self) -> None:
        if self.url is not None and self._made:
            client = Redis.from_url(self.url)
            try:
                for namespace, _ in self._made:
                    keys = [k async for k in client.scan_iter(match=f"cnbrain:{namespace}:*")]
                    if keys:
                        await client.delete(*keys)
            except (RedisError, OSError):  # the server is gone: nothing to clean
                pass
            finally:
                await client.aclose()
        for _, caches in self._made:
            await caches.aclose()


@pytest.fixture(params=["memory", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest_asyncio.fixture
async def make_caches(backend: str) -> AsyncIterator[CachesFactory]:
    """`await make_caches(namespace=None, *, rate_window_s=60.0)` builds `Caches` of `backend`."""
    factory = CachesFactory(backend)
    yield factory
    await factory.cleanup()


@pytest_asyncio.fixture
async def make_redis_caches() -> AsyncIterator[CachesFactory]:
    """Like `make_caches`, Redis only (for behaviour that only a shared server has)."""
    factory = CachesFactory("redis")
    yield factory
    await factory.cleanup()


@pytest.fixture
def redis_url() -> str:
    return REDIS_URL


@pytest_asyncio.fixture
async def caches(make_caches: CachesFactory) -> Caches:
    return await make_caches()
