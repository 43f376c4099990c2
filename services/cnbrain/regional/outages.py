"""Which exceptions are outages of what the brain depends on: its database, its cache (Redis)
or another brain. The API answers an outage of its servers with 503 (`problems`); a decision
interrupted by any outage leaves its request pending, to decide again (`use_cases.placing`).
Anything else is a bug."""

import errno
import socket
from typing import Literal

import asyncpg  # type: ignore[import-untyped]
import sqlalchemy.exc
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cnbrain.cache.base import CacheUnavailable
from cnbrain.federation.errors import PeerUnavailable

Outage = Literal["database", "cache", "peer"]
"""What does not answer: the brain's database, its cache, or another brain (a peer)."""

_CONNECTION_FAILURES: tuple[type[BaseException], ...] = (
    ConnectionError,  # refused, reset, aborted, broken pipe
    TimeoutError,  # a connect timeout
    socket.gaierror,  # the host name does not resolve
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
)
_UNREACHABLE = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN}


def outage_of(exc: BaseException) -> Outage | None:
    """What `exc` says does not answer, or None when it is no outage (a bug).

    The cache: Redis' connection and timeout errors, `CacheUnavailable`. A peer:
    `PeerUnavailable`. The database: the pool's timeout, a database error that invalidated its
    connection or was caused by a connection failure, the driver's connection errors, and a
    bare connection error of a socket (the Redis client wraps its own, so a bare one comes from
    connecting to the database). Integrity and programming errors, and other OS errors
    (files), are bugs.
    """
    if isinstance(exc, CacheUnavailable | RedisConnectionError | RedisTimeoutError):
        return "cache"
    if isinstance(exc, PeerUnavailable):
        return "peer"
    if isinstance(exc, sqlalchemy.exc.TimeoutError):
        return "database"
    if isinstance(exc, sqlalchemy.exc.DBAPIError):
        if isinstance(exc, sqlalchemy.exc.IntegrityError | sqlalchemy.exc.ProgrammingError):
            return None
        if exc.connection_invalidated or _caused_by_connection_failure(exc):
            return "database"
        return None
    if _is_connection_failure(exc):
        return "database"
    return None


def _is_connection_failure(exc: BaseException) -> bool:
    if isinstance(exc, _CONNECTION_FAILURES):
        return True
    return isinstance(exc, OSError) and exc.errno in _UNREACHABLE


def _caused_by_connection_failure(exc: BaseException) -> bool:
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if _is_connection_failure(cause):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False
