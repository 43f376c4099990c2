"""The composition root of a regional brain: every part built once, wired to the parts it
uses, started in order and stopped in reverse.

One `RegionalBrain` lives per process. Several processes may share one database (replicas):
the database holds the truth about reservations, and the capacity bus tells replicas when
another one changed capacity or the map, so their snapshots stay fresh (`replicas`).

Standalone (no `region` setting) the brain owns every province of its map. As a member of a
federation it owns one region: its snapshots show free capacity only on that region's sites
and links, its gRPC server answers the national brain (candidates, source segments, its part
of two-phase reservations), and `national` escalates what it cannot place locally.
"""

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import grpc
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from cnbrain.background import background, stop_task
from cnbrain.cache import Caches, build_cache
from cnbrain.execution import CredentialStore
from cnbrain.federation.audit_loop import audit_forever
from cnbrain.federation.auditor import LedgerAuditor, live_requests, region_of_province
from cnbrain.federation.ledger_service import LedgerServicer, add_ledger_service
from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.local_ledger import expire_forever
from cnbrain.federation.segment_rerouting import SegmentRerouter
from cnbrain.federation.steered_paths import Steered, steered_paths
from cnbrain.netmap.load import load_document
from cnbrain.private_files import write_private
from cnbrain.regional.admission_loop import AdmissionLoop
from cnbrain.regional.authentication import Authenticator
from cnbrain.regional.dispatcher import Dispatcher
from cnbrain.regional.federation import (
    AnnouncingWatch,
    NationalLink,
    RegionalServicer,
    add_regional_service,
)
from cnbrain.regional.forwarding import Forwarder, ServeForwarded
from cnbrain.regional.metrics import Metrics
from cnbrain.regional.national_paths import NationalPaths
from cnbrain.regional.paths_service import RegionalPathsServicer, add_regional_paths_service
from cnbrain.regional.replicas import Replicas
from cnbrain.regional.rerouted_segments import SegmentNotes, tell_source
from cnbrain.regional.rerouting import Rerouter
from cnbrain.regional.security import Role
from cnbrain.regional.settings import Settings
from cnbrain.regional.unit_of_work import CapacityChanges
from cnbrain.regional.use_cases import RequestUseCases
from cnbrain.regional.use_cases.admin import AdminUseCases
from cnbrain.regional.use_cases.cohort_quota import CohortQuotas
from cnbrain.regional.use_cases.deciding import Decider
from cnbrain.regional.use_cases.map_admin import MapAdministration
from cnbrain.regional.use_cases.policy_sync import (
    FollowPolicy,
    follow_priority_classes,
    follow_weight_matrix,
)
from cnbrain.regional.use_cases.priority_classes import ManagePriorityClasses
from cnbrain.regional.use_cases.recover import start_recovery
from cnbrain.regional.use_cases.tenancy_sync import FollowTenancy
from cnbrain.regional.use_cases.timelines import ReadTimelines
from cnbrain.rpc.server import RunningServer, start_server
from cnbrain.storage import priority_classes, registry, tenants
from cnbrain.storage.database import create_engine, session_factory, upgrade_schema

log = logging.getLogger("cnbrain.regional")


@dataclass(frozen=True, slots=True, eq=False)
class RegionalBrain:
    """The parts of one running regional brain (see `running`). The HTTP edge reaches each
    through its own dependency; nothing below the edge is handed this object."""

    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    caches: Caches
    credentials: CredentialStore
    """The deployment's credentials for sites' cluster schedulers (`docs/execution.md`)."""
    live_map: LiveMap
    replicas: Replicas
    changes: CapacityChanges
    """The unit of work of every change of this brain's capacity."""
    authenticator: Authenticator
    national: NationalLink | None
    forwarder: Forwarder | None
    """In a federation, what forwards tenants' calls another region must answer."""
    tenancy: FollowTenancy | None
    """In a federation, this brain's follower of the national brain's tenancy."""
    requests: RequestUseCases
    admin: AdminUseCases
    map_admin: MapAdministration
    priority_classes: ManagePriorityClasses
    dispatcher: Dispatcher
    admission: AdmissionLoop
    auditor: LedgerAuditor
    """The ledger auditor (`docs/federation.md`, "The ledger auditor"); its last report."""


@asynccontextmanager
async def running(
    settings: Settings, metrics: Metrics | None = None
) -> AsyncIterator[RegionalBrain]:
    """A regional brain started on `settings`: the schema migrated, the built-in map loaded
    into an empty database, the first admin installed, the map and engine built, the replicas
    followed, the federation joined (when `region` is set), the requests an earlier stop left
    pending recovered, the dispatcher, the admission loop and the ledger auditor running. On
    exit (or when a step of the start raises) what was started is stopped in reverse. Its
    parts count into `metrics` (None: a registry of its own, which nothing reads)."""
    metrics = metrics or Metrics()
    async with AsyncExitStack() as stack:
        database: AsyncEngine = create_engine(settings.database_url)
        stack.push_async_callback(database.dispose)
        sessions = session_factory(database)
        caches = build_cache(settings.redis_url, namespace=settings.bus_namespace)
        stack.push_async_callback(caches.aclose)
        await prepare_database(settings, sessions)

        live_map = LiveMap(sessions, owner=settings.region, restrict=settings.region is not None)
        await live_map.reload()
        replicas = Replicas(caches, instance_id=settings.instance_id, live_map=live_map)
        stack.push_async_callback(replicas.drain)
        background(stack, replicas.follow(), "replicas")
        cohorts = CohortQuotas()
        steered = steered_paths(settings, sessions=sessions, owner=settings.region)
        stack.callback(steered.close)
        data_plane = steered if steered.steers else None
        national, servicer = await _join_federation(
            stack, settings, sessions, live_map, replicas, cohorts, metrics, data_plane
        )
        national_paths = _national_paths(stack, settings)

        auditor = LedgerAuditor(
            sessions,
            region=settings.region,
            region_of=region_of_province(live_map),
            live_at=national.live_requests if national is not None else None,
            grace_s=settings.audit_grace_s,
            changed=replicas.peer_changed,
        )
        metrics.audit.watch(auditor)
        brain = _assemble(
            settings,
            sessions,
            caches,
            live_map,
            replicas,
            national,
            auditor,
            cohorts,
            metrics,
            data_plane,
            backbone=national_paths,
        )
        parts = None
        if settings.region is not None:
            parts = SegmentRerouter(
                sessions=sessions,
                live_map=live_map,
                steered=steered,
                watch=AnnouncingWatch(live_map, replicas),
                tell=tell_source(settings.region, SegmentNotes(sessions), national_paths),
            )
        steered.reroute = Rerouter(
            sessions=sessions,
            changes=brain.changes,
            live_map=live_map,
            steered=steered,
            owner=settings.region,
            parts=parts,
        )
        background(stack, steered.follow_forever(), "steering")
        if servicer is not None and settings.region is not None:
            servicer.make_room = brain.requests.make_room
            servicer.serve_forwarded = ServeForwarded(
                sessions=sessions,
                cases=brain.requests,
                region_id=settings.region,
                own=lambda: live_map.ownership.provinces,
            )
        recovery = await start_recovery(brain.requests.recover)
        if recovery is not None:
            stack.push_async_callback(stop_task, recovery)
        await brain.dispatcher.start()
        stack.push_async_callback(brain.dispatcher.stop)
        replicas.on_capacity(brain.admission.wake)
        replicas.on_queue(brain.admission.queued)
        background(stack, brain.admission.run(brain.requests.admit), "admission")
        if national is not None:
            follow = FollowPolicy(
                [
                    follow_weight_matrix(
                        sessions=sessions,
                        live_map=live_map,
                        national=national,
                        announce=lambda: replicas.announce("map"),
                    ),
                    follow_priority_classes(sessions=sessions, national=national),
                ],
                interval_s=settings.summary_interval_s,
            )
            background(stack, follow.run(), "federation-policy")
        if brain.tenancy is not None:
            background(stack, brain.tenancy.run(), "tenancy")
        background(
            stack, audit_forever(auditor, interval_s=settings.audit_interval_s), "ledger-audit"
        )
        yield brain


def _assemble(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    caches: Caches,
    live_map: LiveMap,
    replicas: Replicas,
    national: NationalLink | None,
    auditor: LedgerAuditor,
    cohorts: CohortQuotas,
    metrics: Metrics,
    steered: Steered | None = None,
    *,
    backbone: NationalPaths | None = None,
) -> RegionalBrain:
    """The parts above the map and the federation, each handed what it uses; `backbone`
    takes the operators' reports of backbone links to the national brain."""
    credentials = CredentialStore(settings.credentials)
    admission = AdmissionLoop(
        sessions=sessions,
        owner=settings.instance_id,
        interval_s=settings.admission_interval_s,
        lease_s=settings.admission_lease_s,
        observe=metrics.admission_round,
    )

    async def announce() -> None:
        admission.wake()
        await replicas.announce("capacity")

    def queued() -> None:
        admission.queued()
        replicas.queued()

    changes = CapacityChanges(sessions, watch=live_map, announce=announce)
    decider = Decider(
        snapshot=live_map.snapshot,
        engine=lambda: live_map.engine,
        forget=live_map.capacity_changed,
        lock=asyncio.Semaphore(1),
    )
    dispatcher = Dispatcher(
        sessions=sessions,
        settings=settings,
        credentials=credentials,
        map=lambda: live_map.map,
        changes=changes,
        decider=decider,
        forget=live_map.capacity_changed,
        national=national,
    )
    authenticator = Authenticator(sessions)
    tenancy = (
        None
        if national is None
        else FollowTenancy(
            sessions=sessions,
            national=national,
            forget_keys=authenticator.forget,
            interval_s=settings.tenancy_interval_s,
            region=settings.region,
        )
    )
    return RegionalBrain(
        settings=settings,
        sessions=sessions,
        caches=caches,
        credentials=credentials,
        live_map=live_map,
        replicas=replicas,
        changes=changes,
        authenticator=authenticator,
        national=national,
        forwarder=(
            None
            if national is None
            else Forwarder(
                region=settings.region or "",
                own=live_map.ownership.provinces,
                map=lambda: live_map.map,
                link=national,
            )
        ),
        tenancy=tenancy,
        requests=RequestUseCases.build(
            settings=settings,
            sessions=sessions,
            caches=caches,
            live_map=live_map,
            changes=changes,
            decider=decider,
            national=national,
            peer_changed=replicas.peer_changed,
            wake_jobs=dispatcher.wake,
            wake_admission=queued,
            cohorts=cohorts,
            decided=metrics.decided,
            preempted=metrics.preempted,
            steered=steered,
        ),
        admin=AdminUseCases.build(
            sessions=sessions,
            forget_keys=authenticator.forget,
            fair_shares_changed=cohorts.forget,
            tenancy=tenancy,
        ),
        map_admin=MapAdministration(
            sessions=sessions,
            live_map=live_map,
            changes=changes,
            replicas=replicas,
            credentials=credentials,
            policy=national,
            backbone=backbone,
        ),
        priority_classes=ManagePriorityClasses(sessions, policy=national),
        dispatcher=dispatcher,
        admission=admission,
        auditor=auditor,
    )


async def prepare_database(settings: Settings, sessions: async_sessionmaker[AsyncSession]) -> None:
    """Migrate the schema, load the built-in map and priority classes into an empty database,
    and install the first admin (its API key written to `admin_token_file` before the commit:
    if it cannot be written, no admin is stored and the next start tries again)."""
    await upgrade_schema(settings.database_url)
    async with sessions.begin() as session:
        if await registry.seed_if_empty(session, document=load_document(settings.map)):
            log.info("loaded map %s into an empty database", settings.map)
    async with sessions.begin() as session:
        if await priority_classes.seed_if_empty(session):
            log.info("stored the built-in priority classes")
    async with sessions.begin() as session:
        if await tenants.has_users(session):
            return
        admin = await tenants.create_user(session, name="admin", role=Role.ADMIN, tenant_id=None)
        secret = settings.admin_token.get_secret_value() if settings.admin_token else None
        token = await tenants.create_api_key(session, user_id=admin.id, token=secret)
        write_private(settings.admin_token_file, token + "\n")
    log.warning("first start: the admin API key is in %s", settings.admin_token_file)


async def _join_federation(
    stack: AsyncExitStack,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    live_map: LiveMap,
    replicas: Replicas,
    cohorts: CohortQuotas,
    metrics: Metrics,
    steered: Steered | None = None,
) -> tuple[NationalLink | None, RegionalServicer | None]:
    """As a region's brain (`region` set): expire the parts peers prepared here and left,
    serve the national brain over gRPC (when `grpc_port` is set; its LedgerService holds the
    parts that count against quota here to the tenants' cohorts, `cohorts`; the servicer is
    returned, to be given the use cases it serves once they are built), and link to it (when
    `national_endpoint` is set; the link is returned)."""
    region = settings.region
    if region is None:
        return None, None
    security = settings.security(region)
    background(stack, expire_forever(sessions, changed=replicas.peer_changed), "expiry")
    server: RunningServer | None = None
    servicer: RegionalServicer | None = None
    if settings.grpc_port is not None:
        servicer = regional = RegionalServicer(
            live_map,
            region_id=region,
            timelines=ReadTimelines(sessions=sessions, live_map=live_map),
            live_requests=live_requests(sessions),
        )
        ledger = LedgerServicer(
            sessions,
            view=live_map.view,
            watch=AnnouncingWatch(live_map, replicas),
            take=cohorts.take_parts,
            metrics=metrics.ledger_parts,
            steered=steered,
        )

        paths = RegionalPathsServicer(SegmentNotes(sessions))

        def register(grpc_server: grpc.aio.Server) -> list[str]:
            return [
                add_regional_service(grpc_server, regional),
                add_ledger_service(grpc_server, ledger),
                add_regional_paths_service(grpc_server, paths),
            ]

        server = await start_server(
            address=f"{settings.grpc_host}:{settings.grpc_port}",
            security=security,
            register=register,
            metrics=metrics.grpc,
        )
        stack.push_async_callback(server.stop, 2.0)
    advertised = settings.advertise_endpoint or (
        f"{settings.grpc_host}:{server.port if server else settings.grpc_port}"
    )
    if server is not None:
        log.info("region %s: gRPC on %s", region, advertised)
    if not settings.national_endpoint:
        return None, servicer
    national = NationalLink(
        settings.national_endpoints,
        settings=settings,
        security=security,
        region_id=region,
        advertised_endpoint=advertised,
        live_map=live_map,
        escalated=metrics.escalated,
    )
    stack.push_async_callback(national.close)
    background(stack, national.run(), "national-link")
    return national, servicer


def _national_paths(stack: AsyncExitStack, settings: Settings) -> NationalPaths | None:
    """As a region's brain linked to a national brain (`region` and `national_endpoint`
    set): its client of the national brain's NationalPathsService (None otherwise)."""
    if settings.region is None or not settings.national_endpoint:
        return None
    paths = NationalPaths(
        settings.national_endpoints,
        security=settings.security(settings.region),
        region_id=settings.region,
        deadline_s=settings.call_deadline_s,
    )
    stack.push_async_callback(paths.close)
    return paths
