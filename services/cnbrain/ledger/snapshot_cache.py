"""A brain's cached snapshot of its ledger, kept current around its own changes."""

import asyncio
from collections.abc import Awaitable, Callable

from cnbrain.ledger.held_room import HeldSnapshot
from cnbrain.ledger.reservation import Reservation
from cnbrain.netmap.arrays import MapArrays


class SnapshotCache:
    """`load()` reads the snapshot, with the room holds on it, from the database; `arrays()`
    gives the map arrays in use.

    Contract: `get` answers the cached snapshot, or loads one (one load at a time) and caches
    it unless the ledger changed while it was read. `invalidate` drops it. A transaction that
    takes capacity is bracketed by `begin_change()` and `end_change(what it took)`: a read
    overlapping it is not cached, and the cached snapshot (read before it) takes the
    reservation too, or is dropped when the map changed meanwhile or the reservation's
    request has a room hold in it (taking ends the hold in the ledger).
    """

    def __init__(
        self, load: Callable[[], Awaitable[HeldSnapshot]], *, arrays: Callable[[], MapArrays]
    ) -> None:
        self._load = load
        self._arrays = arrays
        self._snapshot: HeldSnapshot | None = None
        self._generation = 0
        self._lock = asyncio.Lock()

    @property
    def cached(self) -> HeldSnapshot | None:
        """The cached snapshot, if there is one."""
        return self._snapshot

    async def get(self) -> tuple[HeldSnapshot, bool]:
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
        if snapshot.free.arrays is self._arrays():
            self._snapshot = snapshot.adjusted(reservation)
        else:
            self._snapshot = None
