"""The composition root of the national brain: its database (the backbone ledger), map and
engine, the regions' directory, the cross-region placer and its two-phase-commit coordinator
over a local and a remote participant, and its gRPC server; started in order and stopped in
reverse."""

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import grpc
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.background import background
from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.domain.rerouting import SegmentRerouting
from cnbrain.federation.audit_loop import audit_forever
from cnbrain.federation.auditor import LedgerAuditor, region_of_province
from cnbrain.federation.ledger_service import LedgerServicer, add_ledger_service
from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.local_ledger import expire_forever
from cnbrain.federation.segment_rerouting import SegmentRerouter
from cnbrain.federation.steered_paths import steered_paths
from cnbrain.ledger.audit import Liveness
from cnbrain.national.coordinator import Coordinator
from cnbrain.national.forwarding import ForwardCalls
from cnbrain.national.inflight import DatabaseJournal
from cnbrain.national.known_regions import DatabaseRegions
from cnbrain.national.map_sync import MapSync
from cnbrain.national.metrics import NationalMetrics
from cnbrain.national.orchestrator import CrossRegionPlacer
from cnbrain.national.participants import LocalParticipant, Participants
from cnbrain.national.paths_service import (
    NationalPathsServicer,
    add_national_paths_service,
    note_at,
)
from cnbrain.national.policy import FederationPolicy
from cnbrain.national.regions import RegionDirectory, owned_provinces
from cnbrain.national.release_backlog import DatabaseBacklog
from cnbrain.national.replicas import Replica
from cnbrain.national.service import NationalServicer, add_national_service
from cnbrain.national.settings import NationalSettings
from cnbrain.national.site_routes import SiteRoutes
from cnbrain.national.tenancy import FederationTenancy
from cnbrain.national.waiting import PlaceOrPlan
from cnbrain.netmap.load import load_document
from cnbrain.rpc.server import RunningServer, start_server
from cnbrain.storage import priority_classes, registry
from cnbrain.storage.database import create_engine, session_factory, upgrade_schema

log = logging.getLogger("cnbrain.national")


@dataclass(frozen=True, slots=True, eq=False)
class NationalBrain:
    """The parts of the running national brain (see `running`). It owns the backbone links
    (in its own database) and no site, and arbitrates between regions."""

    settings: NationalSettings
    sessions: async_sessionmaker[AsyncSession]
    live_map: LiveMap
    """The backbone's map and free capacity (the national brain's snapshots are not
    restricted: the planner takes only the backbone's links of them)."""
    directory: RegionDirectory
    coordinator: Coordinator
    placer: CrossRegionPlacer
    auditor: LedgerAuditor
    server: RunningServer | None
    metrics: NationalMetrics
    """What its parts count, and what a scrape reads (`national.metrics`)."""


@asynccontextmanager
async def running(
    settings: NationalSettings, metrics: NationalMetrics | None = None
) -> AsyncIterator[NationalBrain]:
    """The national brain (one replica of it) started on `settings`: the schema migrated,
    the built-in map and priority classes loaded into an empty database, the engine built,
    the regions known from the database taken back, its lease kept, the parts of the
    placements that a run before (or a replica that stopped) left under way released, expiry
    of abandoned prepared parts running, retries of failed releases, the ledger auditor and
    the following of its backbone segments (steered when it steers, and re-routed off links
    down: `federation.segment_rerouting`) running while this replica holds their lease
    (`national.replicas`), and gRPC served (when `grpc_port` is set). Its parts
    count into `metrics` (None: a registry of its own, which nothing reads)."""
    metrics = metrics or NationalMetrics()
    async with AsyncExitStack() as stack:
        database = create_engine(settings.database_url)
        stack.push_async_callback(database.dispose)
        sessions = session_factory(database)
        await upgrade_schema(settings.database_url)
        async with sessions.begin() as session:
            if await registry.seed_if_empty(session, document=load_document(settings.map)):
                log.info("loaded map %s into an empty database", settings.map)
        async with sessions.begin() as session:
            if await priority_classes.seed_if_empty(session):
                log.info("stored the built-in priority classes")
        live_map = LiveMap(sessions, owner=NATIONAL_OWNER, restrict=False)
        await live_map.reload()

        security = settings.security(NATIONAL_OWNER)
        directory = RegionDirectory(security, known=DatabaseRegions(sessions))
        stack.push_async_callback(directory.close)
        known = await directory.restore(lambda region: owned_provinces(live_map.map, region))
        if known:
            log.info("regions known from the database: %s", ", ".join(known))
        steered = steered_paths(settings, sessions=sessions, owner=NATIONAL_OWNER)
        stack.callback(steered.close)

        async def tell(region_id: str, news: SegmentRerouting) -> None:
            await note_at(directory, region_id, news, deadline_s=settings.call_deadline_s)

        steered.reroute = SegmentRerouter(
            sessions=sessions, live_map=live_map, steered=steered, watch=live_map, tell=tell
        )
        data_plane = steered if steered.steers else None
        local = LocalParticipant(
            sessions, arrays=lambda: live_map.engine.arrays, watch=live_map, steered=data_plane
        )
        coordinator = Coordinator(
            Participants(local, directory, deadline_s=settings.call_deadline_s),
            ttl_ms=settings.prepare_ttl_ms,
            backlog=DatabaseBacklog(sessions),
            journal=DatabaseJournal(sessions, replica=settings.instance_id),
            count=metrics.two_phase,
        )
        replica = Replica(sessions, name=settings.instance_id, lease_s=settings.replica_lease_s)
        background(stack, replica.live_forever(), "replica-lease")
        recovered = await coordinator.recover()
        if recovered:
            log.warning("released the parts of %d placements left under way", recovered)
        background(stack, replica.recover_forever(coordinator), "recovery")
        placer = CrossRegionPlacer(
            settings=settings,
            live_map=live_map,
            directory=directory,
            coordinator=coordinator,
            held=local,
            placed=metrics.placed,
        )
        background(stack, expire_forever(sessions, changed=live_map.capacity_changed), "expiry")

        async def live_at(region_id: str, request_ids: Sequence[str]) -> Liveness:
            return await directory.live_requests(
                region_id, request_ids, deadline_s=settings.call_deadline_s
            )

        auditor = LedgerAuditor(
            sessions,
            region=None,
            region_of=region_of_province(live_map),
            live_at=live_at,
            grace_s=settings.audit_grace_s,
            changed=live_map.capacity_changed,
        )
        metrics.watch(
            directory=directory,
            coordinator=coordinator,
            auditor=auditor,
            summary_interval_s=settings.summary_interval_ms / 1000,
        )
        background(
            stack,
            replica.duties_forever(
                [
                    ("release-retries", coordinator.retry_releases_forever),
                    (
                        "ledger-audit",
                        lambda: audit_forever(auditor, interval_s=settings.audit_interval_s),
                    ),
                    ("steering", steered.follow_forever),
                ]
            ),
            "duties",
        )

        policy = FederationPolicy(sessions=sessions, live_map=live_map)
        background(
            stack,
            policy.follow_replicas_forever(settings.summary_interval_ms / 1000),
            "follow-replicas",
        )
        server: RunningServer | None = None
        if settings.grpc_port is not None:
            national = NationalServicer(
                settings=settings,
                live_map=live_map,
                directory=directory,
                placer=placer,
                waiting=PlaceOrPlan(
                    settings=settings,
                    sessions=sessions,
                    live_map=live_map,
                    directory=directory,
                    placer=placer,
                ),
                map_sync=MapSync(sessions=sessions, live_map=live_map),
                policy=policy,
                tenancy=FederationTenancy(sessions),
                forward=ForwardCalls(
                    directory,
                    map=lambda: live_map.map,
                    read_deadline_s=settings.call_deadline_s,
                    counted=metrics.forwarded,
                ),
                site_routes=SiteRoutes(
                    live_map=live_map, directory=directory, deadline_s=settings.call_deadline_s
                ),
            )
            ledger = LedgerServicer(
                sessions,
                view=live_map.view,
                watch=live_map,
                metrics=metrics.ledger_parts,
                steered=data_plane,
            )

            paths = NationalPathsServicer(
                sessions=sessions,
                live_map=live_map,
                directory=directory,
                deadline_s=settings.call_deadline_s,
            )

            def register(grpc_server: grpc.aio.Server) -> list[str]:
                return [
                    add_national_service(grpc_server, national),
                    add_ledger_service(grpc_server, ledger),
                    add_national_paths_service(grpc_server, paths),
                ]

            server = await start_server(
                address=f"{settings.grpc_host}:{settings.grpc_port}",
                security=security,
                register=register,
                metrics=metrics.grpc,
            )
            stack.push_async_callback(server.stop, 2.0)
            log.info("national brain: gRPC on %s:%d", settings.grpc_host, server.port)
        yield NationalBrain(
            settings=settings,
            sessions=sessions,
            live_map=live_map,
            directory=directory,
            coordinator=coordinator,
            placer=placer,
            auditor=auditor,
            server=server,
            metrics=metrics,
        )
