"""Clocks for the simulator: the system's, and a manual one that tests move by hand."""

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """Wall time in POSIX seconds, and a way to wait on it."""

    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once `seconds` have passed on this clock."""
        ...


class SystemClock:
    """The machine's clock: `time.time()` and `asyncio.sleep`."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualClock:
    """A clock that moves only when told: by `advance`, or by `sleep`, which advances it by the
    time slept (and yields to the event loop once), so waiting costs no real time."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward; raises `ValueError` for a negative step."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back: {seconds}")
        self._now += seconds

    async def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)
