"""A brain's cached snapshot of its ledger, kept current around its own changes."""

import asyncio
from collections.abc import Awaitable, Callable

from cnbrain.ledger.reservation import Reservation
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays


class SnapshotCache:
    """`load()` reads the snapshot from the database; `arrays()` gives the map arrays in use.

    Contract: `get` answers the cached snapshot, or loads one (one load at a time) and caches
    it unless the ledger changed while it was read. `invalidate` drops it. A transaction that
    takes capacity is bracketed by `begin_change()` and `end_change(what it took)`: a read
    overlapping it is not cached, and the cached snapshot (read before it) takes the
    reservation too, or is dropped when the map changed meanwhile.
    """

    def __init__(
        self, load: Callable[[], Awaitable[Snapshot]], *, arrays: Callable[[], MapArrays]
    ) -> None:
        self._load = load
        self._arrays = arrays
        self._snapshot: Snapshot | None = None
        self._generation = 0
        self._lock = asyncio.Lock()

    @property
    def cached(self) -> Snapshot | None:
        """The cached snapshot, if there is one."""
        return self._snapshot

    async def get(self) -> tuple[Snapshot, bool]:
        """The snapshot, and whether it was read from the database just now."""
        async with self._lock:
            snapshot = self._snapshot
            if snapshot is not None:
                return snapshot, False
            generation = self._generation
            snapshot = await self._load()
            if generation == self._generation:
                self._snapshot = snapshot
            return snapshot, True

    def invalidate(self) -> None:
        """Forget the cached snapshot, and any read of it that began before this call."""
        self._generation += 1
        self._snapshot = None

    def begin_change(self) -> None:
        self._generation += 1

    def end_change(self, reservation: Reservation | None) -> None:
        self._generation += 1
        snapshot = self._snapshot
        if reservation is None or snapshot is None:
            return
        if snapshot.arrays is self._arrays():
            self._snapshot = snapshot.adjusted(reservation, taken=True)
        else:
            self._snapshot = None
