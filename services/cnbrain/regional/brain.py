"""The running regional brain: database, cache, map and placement engine, kept current.

One `Brain` lives per process. Several processes may share one database (replicas): the
database holds the truth about reservations, and the capacity bus tells replicas when
another one changed capacity or the map, so their snapshots stay fresh.

Standalone (no `region` setting) the brain owns every province of its map. As a member of a
federation it owns one region: its snapshots show free capacity only on that region's sites
and links, its gRPC server answers the national brain (candidates, source segments, its part
of two-phase reservations), and `national` escalates what it cannot place locally.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from cnbrain.cache import Caches, build_cache, follow
from cnbrain.cache.base import CapacityEvent, CapacityKind
from cnbrain.execution import CredentialStore
from cnbrain.federation.ledger_service import LedgerServicer, expire_forever
from cnbrain.federation.ownership import Ownership
from cnbrain.ledger.reservation import Reservation
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.ledger.snapshot_cache import SnapshotCache
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.load import load_document
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.registry import EngineConfig
from cnbrain.private_files import write_private
from cnbrain.regional.federation import (
    AnnouncingWatch,
    NationalLink,
    RegionalServicer,
    stop_task,
)
from cnbrain.regional.security import Principal, Role
from cnbrain.regional.settings import Settings
from cnbrain.regional.unit_of_work import CapacityChanges
from cnbrain.rpc.server import RunningServer, start_server
from cnbrain.storage import ledger_store, registry, tenants
from cnbrain.storage.database import create_engine, session_factory, upgrade_schema
from cnbrain.storage.weights import get_weight_matrix
from cnbrain.v1 import ledger_pb2, ledger_pb2_grpc, regional_pb2, regional_pb2_grpc

log = logging.getLogger("cnbrain.regional")


@dataclass(frozen=True, slots=True)
class Placement:
    """The map and engine in use; replaced whole when the map changes."""

    map: ComputeNetworkMap
    engine: PlacementEngine
    ownership: Ownership


class Brain:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.db: AsyncEngine = create_engine(settings.database_url)
        self.sessions: async_sessionmaker[AsyncSession] = session_factory(self.db)
        self.caches: Caches = build_cache(settings.redis_url, namespace=settings.bus_namespace)
        self.credentials = CredentialStore(settings.credentials)
        """The deployment's credentials for sites' cluster schedulers (`docs/execution.md`)."""
        self._placement: Placement | None = None
        self._snapshots = SnapshotCache(
            self._load_snapshot, arrays=lambda: self.placement.engine.arrays
        )
        self.changes = CapacityChanges(
            self.sessions, watch=self, announce=lambda: self.announce("capacity")
        )
        """The unit of work of every change of this brain's capacity."""
        self._listener: asyncio.Task[None] | None = None
        self.plan_lock = asyncio.Semaphore(1)
        self.verified_keys: dict[str, tuple[Principal, float]] = {}
        """SHA-256 of a bearer token -> (its principal, monotonic expiry); see deps.AUTH_CACHE_S."""
        self.verifying: dict[str, asyncio.Future[Principal | None]] = {}
        """The verifications of keys under way, by SHA-256 of the token (see deps)."""
        self.wake_dispatcher: Callable[[], None] | None = None
        """Starts the next round of the running dispatcher now (None: none runs)."""
        self.known_tenants: set[str] = set()
        """Tenant ids found in the database (tenants are never deleted, so this stays true)."""
        self.region_id: str = settings.region or ""
        self.security = settings.security(settings.region or "regional")
        self.server: RunningServer | None = None
        self.national: NationalLink | None = None
        self._federation_tasks: list[asyncio.Task[None]] = []

    @property
    def federated(self) -> bool:
        return self.settings.region is not None

    @property
    def ownership(self) -> Ownership:
        return self.placement.ownership

    @property
    def advertised_endpoint(self) -> str:
        if self.settings.advertise_endpoint:
            return self.settings.advertise_endpoint
        port = self.server.port if self.server else self.settings.grpc_port
        return f"{self.settings.grpc_host}:{port}"

    def view(self) -> tuple[MapArrays, Ownership]:
        return self.placement.engine.arrays, self.placement.ownership

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
        if self.federated:
            await self._join_federation()

    async def _join_federation(self) -> None:
        settings = self.settings
        self._federation_tasks.append(
            asyncio.create_task(expire_forever(self.sessions, changed=self.peer_changed))
        )
        if settings.grpc_port is not None:
            self.server = await start_server(
                address=f"{settings.grpc_host}:{settings.grpc_port}",
                security=self.security,
                register=self._register_services,
            )
            log.info("region %s: gRPC on %s", self.region_id, self.advertised_endpoint)
        if settings.national_endpoint:
            self.national = NationalLink(self, settings.national_endpoint)
            self._federation_tasks.append(asyncio.create_task(self.national.run()))

    def _register_services(self, server: grpc.aio.Server) -> list[str]:
        regional_pb2_grpc.add_RegionalBrainServiceServicer_to_server(RegionalServicer(self), server)
        ledger_pb2_grpc.add_LedgerServiceServicer_to_server(
            LedgerServicer(self.sessions, view=self.view, watch=AnnouncingWatch(self)), server
        )
        return [
            regional_pb2.DESCRIPTOR.services_by_name["RegionalBrainService"].full_name,
            ledger_pb2.DESCRIPTOR.services_by_name["LedgerService"].full_name,
        ]

    def peer_changed(self) -> None:
        """A peer's call changed capacity here: forget the snapshot, tell the replicas."""
        self.capacity_changed()
        self.announce_soon()

    def announce_soon(self) -> None:
        """`announce("capacity")` in the background."""
        task = asyncio.get_running_loop().create_task(self.announce("capacity"))
        self._federation_tasks.append(task)
        task.add_done_callback(self._federation_tasks.remove)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(2.0)
        for task in list(self._federation_tasks):
            await stop_task(task)
        if self.national is not None:
            await self.national.close()
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
        owner = self.settings.region
        ownership = Ownership.of(cmap, owner) if owner else Ownership.everything(cmap)
        self._placement = Placement(map=cmap, engine=engine, ownership=ownership)
        self.capacity_changed()

    async def snapshot(self) -> tuple[Snapshot, bool]:
        """Free capacity as the database holds it (of what this brain owns), and whether it
        was read just now (False: the cached copy, kept current with this brain's own
        reservations)."""
        return await self._snapshots.get()

    async def _load_snapshot(self) -> Snapshot:
        placement = self.placement
        async with self.sessions() as session:
            snapshot = await ledger_store.load_snapshot(session, arrays=placement.engine.arrays)
        return placement.ownership.restrict(snapshot) if self.federated else snapshot

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

    async def announce(self, kind: CapacityKind) -> None:
        """Tell the other replicas that capacity (or the map) changed here. Never raises:
        it comes after a commit, which a bus outage must not turn into an error; a lost
        announcement is logged, and the replicas resync when their subscriptions come back."""
        event = CapacityEvent(kind=kind, origin=self.settings.instance_id)
        try:
            await self.caches.bus.publish(event)
        except Exception as exc:  # whatever failed, the change is committed
            log.warning("could not announce a %s change to the replicas: %s", kind, exc)

    async def _listen(self) -> None:
        """Follow the other replicas' events until cancelled, resubscribing after outages."""
        await follow(self.caches.bus, on_event=self._heard, resync=self.reload_map)

    async def _heard(self, event: CapacityEvent) -> None:
        if event.origin == self.settings.instance_id:
            return
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
            # Written before the commit: if it cannot be, no admin is stored and the next
            # start tries again.
            write_private(self.settings.admin_token_file, token + "\n")
        log.warning("first start: the admin API key is in %s", self.settings.admin_token_file)
