"""The map a brain places with, and its free capacity, kept current.

The map (and the engine and ownership built on it) is read from the registry in the database
and replaced whole by `reload`. Free capacity is a snapshot of the ledger, with the room
holds active when it was read (`storage.room_holds`), cached between changes: this brain's
own changes are bracketed (`begin_local_change`/`end_local_change`, see
`federation.local_ledger.local_change`) so the cached copy follows them, and any other
change (a replica's, a peer's, a release) calls `capacity_changed` to forget it.

`snapshot` is what a request without a hold may take: the free capacity less every hold
that lasts beyond now (by `clock`, at each call, so a hold that lapses stops counting at
once). `held_snapshot` gives the free capacity and the holds, for what one request may take
(`HeldSnapshot.seen_by`: less the holds of the others).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.federation.ownership import Ownership
from cnbrain.ledger.held_room import HeldSnapshot
from cnbrain.ledger.reservation import Reservation
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.ledger.snapshot_cache import SnapshotCache
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.registry import EngineConfig
from cnbrain.storage import ledger_store, registry, room_holds
from cnbrain.storage.weights import get_weight_matrix


@dataclass(frozen=True, slots=True)
class Placement:
    """The map, engine and ownership in use; replaced whole when the map changes."""

    map: ComputeNetworkMap
    engine: PlacementEngine
    ownership: Ownership


class LiveMap:
    """The map and free capacity of one brain over its database. `owner` is what the brain
    owns in a federation (a region, or the national brain's backbone; None: standalone,
    owning every province of its map). With `restrict`, snapshots show free capacity only on
    the owner's sites and links.

    Contract: `placement` raises RuntimeError before the first `reload`. A `snapshot` is never
    older than the last `capacity_changed` or `reload` that returned before it was asked for.
    """

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        owner: str | None,
        restrict: bool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sessions = sessions
        self.owner = owner
        self._restrict = restrict
        self._clock = clock
        self._placement: Placement | None = None
        self._snapshots = SnapshotCache(self._load_snapshot, arrays=lambda: self.engine.arrays)

    @property
    def federated(self) -> bool:
        return self.owner is not None

    @property
    def placement(self) -> Placement:
        if self._placement is None:
            raise RuntimeError("the map has not been loaded")
        return self._placement

    @property
    def map(self) -> ComputeNetworkMap:
        return self.placement.map

    @property
    def engine(self) -> PlacementEngine:
        return self.placement.engine

    @property
    def ownership(self) -> Ownership:
        return self.placement.ownership

    def view(self) -> tuple[MapArrays, Ownership]:
        """The map arrays in use and what this brain owns of them."""
        placement = self.placement
        return placement.engine.arrays, placement.ownership

    async def reload(self) -> None:
        """Rebuild the map and engine from the registry (and weight matrix) in the database."""
        async with self._sessions() as session:
            document = await registry.load_document(session)
            matrix = await get_weight_matrix(session)
        cmap = ComputeNetworkMap.from_document(document)
        engine = PlacementEngine(cmap, config=EngineConfig(weight_matrix=matrix))
        ownership = Ownership.of(cmap, self.owner) if self.owner else Ownership.everything(cmap)
        self._placement = Placement(map=cmap, engine=engine, ownership=ownership)
        self.capacity_changed()

    async def snapshot(self) -> tuple[Snapshot, bool]:
        """Free capacity as the database holds it (of what this brain owns) less the room
        holds active now, what a request without a hold may take; and whether it was read
        just now (False: the cached copy, kept current with this brain's own reservations)."""
        held, fresh = await self._snapshots.get()
        return held.seen_by(None, now_s=self._clock()), fresh

    async def held_snapshot(self) -> tuple[HeldSnapshot, bool]:
        """Free capacity as the database holds it (of what this brain owns) with the room
        holds on it, and whether it was read just now (as `snapshot`)."""
        return await self._snapshots.get()

    def now(self) -> float:
        """Now, in epoch seconds, by the clock that ends room holds here."""
        return self._clock()

    async def _load_snapshot(self) -> HeldSnapshot:
        placement = self.placement
        arrays = placement.engine.arrays
        async with self._sessions() as session:
            snapshot = await ledger_store.load_snapshot(session, arrays=arrays)
            holds = await room_holds.active(session, now=datetime.fromtimestamp(self._clock(), UTC))
        free = placement.ownership.restrict(snapshot) if self._restrict else snapshot
        return HeldSnapshot(free, tuple(room_holds.held_rooms(holds, arrays)))

    @property
    def cached_snapshot(self) -> Snapshot | None:
        """The cached snapshot as the database holds it, if there is one (None: the next
        `snapshot` reads one)."""
        cached = self._snapshots.cached
        return None if cached is None else cached.free

    def capacity_changed(self) -> None:
        """Forget the cached snapshot, and any read of it that began before this call."""
        self._snapshots.invalidate()

    def begin_local_change(self) -> None:
        """Call before a transaction that reserves: reads overlapping it are not cached."""
        self._snapshots.begin_change()

    def end_local_change(self, reservation: Reservation | None) -> None:
        """Call after it: `reservation` is what it committed (None: nothing). The cached
        snapshot, read before the transaction began, takes the reservation too."""
        self._snapshots.end_change(reservation)
