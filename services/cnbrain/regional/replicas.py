"""The replicas of one regional brain (processes sharing its database), kept in step over the
capacity bus: each tells the others when it changed capacity or the map, and follows what
they tell it."""

import asyncio
import logging
from collections.abc import Callable

from cnbrain.cache import Caches, follow
from cnbrain.cache.base import CapacityEvent, CapacityKind
from cnbrain.federation.live_map import LiveMap

log = logging.getLogger("cnbrain.regional")


class Replicas:
    """This replica's side of the bus. `instance_id` names it in its events, so it ignores
    its own. `follow` runs until cancelled; `announce` never raises."""

    def __init__(self, caches: Caches, *, instance_id: str, live_map: LiveMap) -> None:
        self._bus = caches.bus
        self._instance_id = instance_id
        self._live_map = live_map
        self._background: set[asyncio.Task[None]] = set()
        self._on_capacity: list[Callable[[], None]] = []
        self._on_queue: list[Callable[[], None]] = []

    def on_capacity(self, listener: Callable[[], None]) -> None:
        """Call `listener()` whenever capacity changes elsewhere (a replica, a peer)."""
        self._on_capacity.append(listener)

    def on_queue(self, listener: Callable[[], None]) -> None:
        """Call `listener()` whenever another replica queues a request."""
        self._on_queue.append(listener)

    def queued(self) -> None:
        """Requests joined the admission queue here: tell the replicas, in the background."""
        self._in_background("queue")

    async def announce(self, kind: CapacityKind) -> None:
        """Tell the other replicas that capacity (or the map) changed here. It comes after a
        commit, which a bus outage must not turn into an error: a lost announcement is
        logged, and the replicas resync when their subscriptions come back."""
        event = CapacityEvent(kind=kind, origin=self._instance_id)
        try:
            await self._bus.publish(event)
        except Exception as exc:  # whatever failed, the change is committed
            log.warning("could not announce a %s change to the replicas: %s", kind, exc)

    def announce_soon(self) -> None:
        """`announce("capacity")` in the background."""
        self._in_background("capacity")

    def _in_background(self, kind: CapacityKind) -> None:
        task = asyncio.get_running_loop().create_task(self.announce(kind))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def peer_changed(self) -> None:
        """A peer's call changed capacity here: forget the snapshot, tell the replicas."""
        self._live_map.capacity_changed()
        self._heard_capacity()
        self.announce_soon()

    def _heard_capacity(self) -> None:
        for listener in self._on_capacity:
            listener()

    async def follow(self) -> None:
        """Follow the other replicas' events until cancelled, resubscribing after outages (and
        reloading the map then, since events may have been missed)."""
        await follow(self._bus, on_event=self._heard, resync=self._live_map.reload)

    async def _heard(self, event: CapacityEvent) -> None:
        if event.origin == self._instance_id:
            return
        if event.kind == "map":
            await self._live_map.reload()
        elif event.kind == "queue":
            for listener in self._on_queue:
                listener()
        else:
            self._live_map.capacity_changed()
            self._heard_capacity()

    async def drain(self) -> None:
        """Wait for the announcements under way."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
