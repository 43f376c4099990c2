"""Decisions on the brain's current snapshot, nothing reserved: one decider for one request
and for a batch."""

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import anyio

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.reservation import Reservation
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.groups import Placement, Scope, place_group
from cnbrain.telemetry.spans import span


class Decider:
    """`snapshot()` gives the brain's snapshot and whether it was read just now; `engine()`
    the engine in use; `forget()` drops the cached snapshot. `lock` admits one decision at a
    time (the engine runs in a worker thread)."""

    def __init__(
        self,
        *,
        snapshot: Callable[[], Awaitable[tuple[Snapshot, bool]]],
        engine: Callable[[], PlacementEngine],
        forget: Callable[[], None],
        lock: asyncio.Semaphore,
    ) -> None:
        self._snapshot = snapshot
        self._engine = engine
        self._forget = forget
        self._lock = lock

    async def decide(
        self,
        batch: Sequence[PlacementRequest],
        *,
        adjust: Callable[[Snapshot], Snapshot] | None = None,
    ) -> tuple[MapArrays, list[Decision], list[Reservation | None], bool]:
        """Decisions for `batch` taken together on the current snapshot (nothing reserved):
        the arrays of the map they were taken on (reservations hold indices into them), the
        decisions, the reservation each placed one needs (None for a rejection), and whether
        the snapshot was read from the database just now. With `adjust`, they are taken on
        `adjust(snapshot)` instead (a snapshot of the same map arrays)."""
        return await self._decided(
            batch,
            lambda engine, snapshot: engine.place_batch(batch, reserve=False, snapshot=snapshot),
            adjust=adjust,
        )

    async def decide_group(
        self,
        members: Sequence[PlacementRequest],
        *,
        placement: Placement,
        scope: Scope,
        group_id: str,
    ) -> tuple[MapArrays, list[Decision], list[Reservation | None], bool]:
        """`decide`, for a group placed all or none (`cnbrain.placement.groups`)."""
        return await self._decided(
            members,
            lambda engine, snapshot: place_group(
                engine,
                members,
                placement=placement,
                scope=scope,
                snapshot=snapshot,
                group_id=group_id,
            ),
        )

    async def _decided(
        self,
        batch: Sequence[PlacementRequest],
        choose: Callable[[PlacementEngine, Snapshot], list[Decision]],
        *,
        adjust: Callable[[Snapshot], Snapshot] | None = None,
    ) -> tuple[MapArrays, list[Decision], list[Reservation | None], bool]:
        """`decide` with `choose` taking the decisions of `batch` on the snapshot."""
        snapshot, fresh = await self._snapshot()
        engine = self._engine()
        if snapshot.arrays is not engine.arrays:
            self._forget()
            snapshot, fresh = await self._snapshot()
            engine = self._engine()
        if adjust is not None:
            snapshot = adjust(snapshot)

        def decide() -> tuple[list[Decision], list[Reservation | None]]:
            decisions = choose(engine, snapshot)
            return decisions, _reservations(engine, batch, decisions)

        async with self._lock:
            with span("placement.decide", {"cnbrain.requests": len(batch)}):
                decisions, reservations = await anyio.to_thread.run_sync(decide)
        return engine.arrays, decisions, reservations, fresh


def _reservations(
    engine: PlacementEngine, batch: Sequence[PlacementRequest], decisions: Sequence[Decision]
) -> list[Reservation | None]:
    """The reservation each placed decision of `batch` needs; None for a rejection."""
    return [
        engine.reservation_for(request, decision)
        if decision.status is DecisionStatus.PLACED
        else None
        for request, decision in zip(batch, decisions, strict=True)
    ]
