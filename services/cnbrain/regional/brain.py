"""The running regional brain: database, cache, map and placement engine, kept current.

One `Brain` lives per process. Several processes may share one database (replicas): the
database holds the truth about reservations, and the capacity bus tells replicas when
another one changed capacity or the map, so their snapshots stay fresh.
"""

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from cnbrain.cache import Caches, build_cache
from cnbrain.cache.base import CapacityEvent, CapacityKind
from cnbrain.ledger.reservation import Reservation
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.load import load_document
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.registry import EngineConfig
from cnbrain.regional.security import Principal, Role
from cnbrain.regional.settings import Settings
from cnbrain.storage import ledger_store, registry, tenants
from cnbrain.storage.database import create_engine, session_factory, upgrade_schema
from cnbrain.storage.weights import get_weight_matrix

log = logging.getLogger("cnbrain.regional")


@dataclass(frozen=True, slots=True)
class Placement:
    """The map and engine in use; replaced whole when the map changes."""

    map: ComputeNetworkMap
    engine: PlacementEngine


class Brain:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.db: AsyncEngine = create_engine(settings.database_url)
        self.sessions: async_sessionmaker[AsyncSession] = session_factory(self.db)
        self.caches: Caches = build_cache(settings.redis_url, namespace=settings.bus_namespace)
        self._placement: Placement | None = None
        self._snapshot: Snapshot | None = None
        self._generation = 0
        self._snapshot_lock = asyncio.Lock()
        self._listener: asyncio.Task[None] | None = None
        self.plan_lock = asyncio.Semaphore(1)
        self.verified_keys: dict[str, tuple[Principal, float]] = {}
        """SHA-256 of a bearer token -> (its principal, monotonic expiry); see deps.AUTH_CACHE_S."""

    @property
    def placement(self) -> Placement:
        if self._placement is None:
            raise RuntimeError("the brain has not started")
        return self._placement

    async def start(self) -> None:
        """Migrate the schema, load the built-in map into an empty database, install the
        first admin, build the engine, and listen to other replicas."""
        await upgrade_schema(self.settings.database_url)
        async with self.sessions.begin() as session:
            if await registry.seed_if_empty(session, document=load_document(self.settings.map)):
                log.info("loaded map %s into an empty database", self.settings.map)
        await self._bootstrap_admin()
        await self.reload_map()
        self._listener = asyncio.create_task(self._listen())

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        await self.caches.aclose()
        await self.db.dispose()

    async def reload_map(self) -> None:
        """Rebuild the map and engine from the registry in the database."""
        async with self.sessions() as session:
            document = await registry.load_document(session)
            matrix = await get_weight_matrix(session)
        cmap = ComputeNetworkMap.from_document(document)
        engine = PlacementEngine(cmap, config=EngineConfig(weight_matrix=matrix))
        self._placement = Placement(map=cmap, engine=engine)
        self.capacity_changed()

    async def snapshot(self) -> tuple[Snapshot, bool]:
        """Free capacity as the database holds it, and whether it was read just now (False:
        the cached copy, kept current with this brain's own reservations)."""
        async with self._snapshot_lock:
            snapshot = self._snapshot
            if snapshot is not None:
                return snapshot, False
            generation = self._generation
            async with self.sessions() as session:
                snapshot = await ledger_store.load_snapshot(
                    session, arrays=self.placement.engine.arrays
                )
            if generation == self._generation:
                self._snapshot = snapshot
            return snapshot, True

    def capacity_changed(self) -> None:
        """Forget the cached snapshot, and any read of it that began before this call."""
        self._generation += 1
        self._snapshot = None

    def begin_local_change(self) -> None:
        """Call before a transaction that reserves: reads overlapping it are not cached."""
        self._generation += 1

    def end_local_change(self, reservation: Reservation | None) -> None:
        """Call after it: `reservation` is what it committed (None: nothing). The cached
        snapshot, read before the transaction began, takes the reservation too."""
        self._generation += 1
        snapshot = self._snapshot
        if reservation is not None and snapshot is not None:
            if snapshot.arrays is self.placement.engine.arrays:
                self._snapshot = snapshot.adjusted(reservation, taken=True)
            else:
                self._snapshot = None

    async def announce(self, kind: CapacityKind) -> None:
        """Tell the other replicas that capacity (or the map) changed here."""
        await self.caches.bus.publish(CapacityEvent(kind=kind, origin=self.settings.instance_id))

    async def _listen(self) -> None:
        async for event in self.caches.bus.subscribe():
            if event.origin == self.settings.instance_id:
                continue
            if event.kind == "map":
                await self.reload_map()
            else:
                self.capacity_changed()

    async def _bootstrap_admin(self) -> None:
        async with self.sessions.begin() as session:
            if await tenants.has_users(session):
                return
            admin = await tenants.create_user(
                session, name="admin", role=Role.ADMIN, tenant_id=None
            )
            secret = (
                self.settings.admin_token.get_secret_value() if self.settings.admin_token else None
            )
            token = await tenants.create_api_key(session, user_id=admin.id, token=secret)
        path = self.settings.admin_token_file
        path.write_text(token + "\n", encoding="utf-8")
        path.chmod(0o600)
        log.warning("first start: the admin API key is in %s", path)
