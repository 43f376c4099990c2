"""Waiting in tests: poll until something holds, or fail the test with what never came."""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


async def until(
    probe: Callable[[], Awaitable[T | None]],
    what: str,
    timeout_s: float = 30.0,
    *,
    every_s: float = 0.1,
) -> T:
    """Await `probe` every `every_s` until it returns something other than None, and return
    that; fail the test naming `what` when `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(every_s)


async def wait_until(condition: Callable[[], bool], timeout_s: float) -> float:
    """Wait until `condition()` holds, checking every 0.05 s; return the seconds it took. The
    test fails when `timeout_s` passes first."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout_s, f"not within {timeout_s} s"
        await asyncio.sleep(0.05)
    return time.monotonic() - start


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Check `condition()` every 0.2 s until it holds, outside an event loop; fail the test
    naming `what` when `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s} s")
        time.sleep(0.2)
