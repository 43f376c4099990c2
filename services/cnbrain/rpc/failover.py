"""Calls to one service that several replicas serve: each call goes to the replica that
answered last, and on to the next when that one is unavailable.

A call is made again on the next replica only when it ends UNAVAILABLE (after the channel's
own retries, `rpc.client`): it was not taken there, so making it on another replica is safe.
Every other outcome is the call's answer: a call that may have been taken is not made twice.
A call whose deadline passed is still its answer, but the next call goes to the next replica
first (one that hangs is not asked again and again). Every RPC of cnbrain.v1 is idempotent
by design, and a call made again after an UNAVAILABLE is no exception.
"""

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Generic, TypeVar

import grpc

S = TypeVar("S")
R = TypeVar("R")

MAX_REPLICAS = 8
"""Replicas of one service a brain may be given."""

ENDPOINT: Final = re.compile(r"^[^\s\x00-\x1f\x7f,]{1,249}:[0-9]{1,5}$")
"""One replica's endpoint: host:port, the host without spaces, commas or control characters."""


def endpoints_of(text: str) -> list[str]:
    """The endpoints of `text`: "host:port" of each replica, separated by commas (spaces
    around them are dropped); from 1 to `MAX_REPLICAS`, each once, each port from 1 to
    65535. Raises ValueError saying what is wrong."""
    endpoints = [part.strip() for part in text.split(",")]
    if not 1 <= len(endpoints) <= MAX_REPLICAS:
        raise ValueError(f"from 1 to {MAX_REPLICAS} endpoints, not {len(endpoints)}")
    for endpoint in endpoints:
        if not ENDPOINT.match(endpoint) or not 1 <= int(endpoint.rsplit(":", 1)[1]) <= 65535:
            raise ValueError(f"{endpoint[:80]!r} is not host:port (port 1 to 65535)")
    if len(set(endpoints)) != len(endpoints):
        raise ValueError("an endpoint is named twice")
    return endpoints


class Failover(Generic[S]):
    """`stubs`, one per replica, in the order of preference; at least one, at most
    `MAX_REPLICAS`. Raises ValueError otherwise."""

    def __init__(self, stubs: Sequence[S]) -> None:
        if not 1 <= len(stubs) <= MAX_REPLICAS:
            raise ValueError(f"from 1 to {MAX_REPLICAS} replicas, not {len(stubs)}")
        self._stubs = list(stubs)
        self._current = 0

    @property
    def current(self) -> int:
        """The index of the replica the next call goes to first."""
        return self._current

    async def call(self, make: Callable[[S], Awaitable[R]]) -> R:
        """`make(stub)` on the current replica, then on each other in turn while the call
        ends UNAVAILABLE; the first replica that answers is the current one from then on.
        Raises the last replica's `grpc.aio.AioRpcError` when none answers, and any other
        error of a call at once (after DEADLINE_EXCEEDED, the next replica becomes the
        current one)."""
        count = len(self._stubs)
        first = self._current
        for step in range(count):
            index = (first + step) % count
            try:
                answer = await make(self._stubs[index])
            except grpc.aio.AioRpcError as error:
                if error.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
                    self._current = (index + 1) % count
                if error.code() is not grpc.StatusCode.UNAVAILABLE or step == count - 1:
                    raise
                continue
            self._current = index
            return answer
        raise AssertionError("unreachable: the last replica's error is raised")
