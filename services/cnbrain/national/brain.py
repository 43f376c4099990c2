"""The running national brain: its database (backbone ledger), map, engine and regions; the
composition root of its use cases (placer, two-phase-commit coordinator) and their ports."""

import asyncio
import contextlib
import logging

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.federation.ledger_service import LedgerServicer, expire_forever
from cnbrain.federation.ownership import Ownership
from cnbrain.ledger.reservation import Reservation
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.ledger.snapshot_cache import SnapshotCache
from cnbrain.national.coordinator import Coordinator
from cnbrain.national.orchestrator import CrossRegionPlacer
from cnbrain.national.participants import LocalParticipant, Participants
from cnbrain.national.regions import RegionDirectory
from cnbrain.national.service import NationalServicer
from cnbrain.national.settings import NationalSettings
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.load import load_document
from cnbrain.placement.engine import PlacementEngine
from cnbrain.rpc.server import RunningServer, start_server
from cnbrain.storage import ledger_store, registry
from cnbrain.storage.database import create_engine, session_factory, upgrade_schema
from cnbrain.v1 import ledger_pb2, ledger_pb2_grpc, national_pb2, national_pb2_grpc

log = logging.getLogger("cnbrain.national")


class NationalBrain:
    """Owns the backbone links (in its own database) and no site; arbitrates between regions."""

    def __init__(self, settings: NationalSettings) -> None:
        self.settings = settings
        self.db: AsyncEngine = create_engine(settings.database_url)
        self.sessions: async_sessionmaker[AsyncSession] = session_factory(self.db)
        self.security = settings.security(NATIONAL_OWNER)
        self.directory = RegionDirectory(self.security)
        local = LocalParticipant(self.sessions, arrays=lambda: self.engine.arrays, watch=self)
        self.coordinator = Coordinator(
            Participants(local, self.directory, deadline_s=settings.call_deadline_s),
            ttl_ms=settings.prepare_ttl_ms,
        )
        self.placer = CrossRegionPlacer(self, self.coordinator, held=local)
        self.plan_lock = asyncio.Lock()
        self._engine: PlacementEngine | None = None
        self._ownership: Ownership | None = None
        self._snapshots = SnapshotCache(self._load_snapshot, arrays=lambda: self.engine.arrays)
        self._tasks: list[asyncio.Task[None]] = []
        self.server: RunningServer | None = None

    @property
    def engine(self) -> PlacementEngine:
        if self._engine is None:
            raise RuntimeError("the national brain has not started")
        return self._engine

    def view(self) -> tuple[MapArrays, Ownership]:
        assert self._ownership is not None
        return self.engine.arrays, self._ownership

    async def start(self) -> None:
        """Migrate, load the map (into an empty database first), serve gRPC."""
        await upgrade_schema(self.settings.database_url)
        async with self.sessions.begin() as session:
            if await registry.seed_if_empty(session, document=load_document(self.settings.map)):
                log.info("loaded map %s into an empty database", self.settings.map)
        async with self.sessions() as session:
            document = await registry.load_document(session)
        cmap = ComputeNetworkMap.from_document(document)
        self._engine = PlacementEngine(cmap)
        self._ownership = Ownership.of(cmap, NATIONAL_OWNER)
        self._tasks.append(
            asyncio.create_task(expire_forever(self.sessions, changed=self.capacity_changed))
        )
        self._tasks.append(asyncio.create_task(self.coordinator.retry_releases_forever()))
        if self.settings.grpc_port is not None:
            self.server = await start_server(
                address=f"{self.settings.grpc_host}:{self.settings.grpc_port}",
                security=self.security,
                register=self._register,
            )
            log.info("national brain: gRPC on %s:%d", self.settings.grpc_host, self.server.port)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(2.0)
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.directory.close()
        await self.db.dispose()

    async def backbone_snapshot(self) -> Snapshot:
        """Free capacity in this brain's ledger (the backbone is what it owns)."""
        snapshot, _ = await self._snapshots.get()
        return snapshot

    async def _load_snapshot(self) -> Snapshot:
        async with self.sessions() as session:
            return await ledger_store.load_snapshot(session, arrays=self.engine.arrays)

    def capacity_changed(self) -> None:
        """Forget the cached snapshot, and any read of it that began before this call."""
        self._snapshots.invalidate()

    def begin_local_change(self) -> None:
        """Call before a transaction that reserves: reads overlapping it are not cached."""
        self._snapshots.begin_change()

    def end_local_change(self, reservation: Reservation | None) -> None:
        """Call after it, with what it took (None: nothing); the cached snapshot takes it."""
        self._snapshots.end_change(reservation)

    def _register(self, server: "object") -> list[str]:
        import grpc

        assert isinstance(server, grpc.aio.Server)
        national_pb2_grpc.add_NationalBrainServiceServicer_to_server(NationalServicer(self), server)
        ledger_pb2_grpc.add_LedgerServiceServicer_to_server(
            LedgerServicer(self.sessions, view=self.view, watch=self), server
        )
        return [
            national_pb2.DESCRIPTOR.services_by_name["NationalBrainService"].full_name,
            ledger_pb2.DESCRIPTOR.services_by_name["LedgerService"].full_name,
        ]
