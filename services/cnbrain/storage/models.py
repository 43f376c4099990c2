"""The database schema of a brain, as SQLAlchemy 2 declarative models.

Quantities use the engine's integer units (CPU millicores, memory MiB, storage GiB,
bandwidth Mbps), so reservations add and subtract exactly. Capacity rows hold three
numbers per resource: `cap`, `used` (held by this brain's reservations) and `external`
(in use by others, as reported by the site); a reservation fits when
used + external + amount <= cap.

Every constraint and index is named by `NAMING_CONVENTION`, so migrations (and SQLite batch
migrations) can refer to them by name.
"""

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from cnbrain.domain.states import ReservationState
from cnbrain.storage.clock import utcnow

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        datetime: DateTime(timezone=True),
    }


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class User(Base):
    """A person or robot. Operators and admins belong to no tenant. A disabled user
    (`disabled_at` set) keeps its rows, but none of its keys authenticates."""

    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    disabled_at: Mapped[datetime | None]


class ApiKey(Base):
    """A bearer key `<id>.<secret>`; only the SHA-256 of the secret is stored."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]


class Quota(Base):
    """A tenant's limits (None: unlimited) and what its held reservations use: the limits
    this brain's ledger holds the tenant to. On a regional brain those are its region's
    limits, and `national_*` is its copy of the federation's national limits; on the national
    brain, whose parts of cross-region reservations count the national quota, the limits are
    the national ones and `national_*` is unused."""

    __tablename__ = "quotas"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    limit_cpu_m: Mapped[int | None] = mapped_column(BigInteger)
    limit_mem_mib: Mapped[int | None] = mapped_column(BigInteger)
    limit_acc_milli: Mapped[int | None] = mapped_column(BigInteger)
    limit_mbps: Mapped[int | None] = mapped_column(BigInteger)
    limit_active_requests: Mapped[int | None] = mapped_column(Integer)
    used_cpu_m: Mapped[int] = mapped_column(BigInteger, default=0)
    used_mem_mib: Mapped[int] = mapped_column(BigInteger, default=0)
    used_acc_milli: Mapped[int] = mapped_column(BigInteger, default=0)
    used_mbps: Mapped[int] = mapped_column(BigInteger, default=0)
    active_requests: Mapped[int] = mapped_column(Integer, default=0)
    national_cpu_m: Mapped[int | None] = mapped_column(BigInteger)
    national_mem_mib: Mapped[int | None] = mapped_column(BigInteger)
    national_acc_milli: Mapped[int | None] = mapped_column(BigInteger)
    national_mbps: Mapped[int | None] = mapped_column(BigInteger)
    national_active_requests: Mapped[int | None] = mapped_column(Integer)


class SiteRecord(Base):
    """A registered site; `document` is the `cnbrain.domain.site.Site` as JSON, without its
    `execution`, which is in its own column (the site's `BackendRef` as JSON; None: the
    simulator every site has by default).

    `position` orders sites as they were registered (the map's site order); a retired site
    keeps its row (reservations refer to it) with status "retired".
    """

    __tablename__ = "sites"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, unique=True)
    province: Mapped[str] = mapped_column(String(32), index=True)
    document: Mapped[dict[str, Any]]
    execution: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="active")
    version: Mapped[int] = mapped_column(Integer, default=1)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class LinkRecord(Base):
    """A registered link; `document` is the `cnbrain.domain.network.Link` as JSON.

    `position` orders links as they were registered (the map's link order).
    """

    __tablename__ = "links"

    id: Mapped[str] = mapped_column(String(260), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, unique=True)
    document: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(16), default="active")
    version: Mapped[int] = mapped_column(Integer, default=1)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class MapFrame(Base):
    """The map's name, regions, provinces and network nodes: a `MapDocument` without sites and
    links, as JSON. `version` goes up by one with every change to the registry (sites, links),
    so replicas can tell that their map is stale."""

    __tablename__ = "map_frame"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    document: Mapped[dict[str, Any]]
    version: Mapped[int] = mapped_column(Integer, default=1)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class SiteCapacity(Base):
    __tablename__ = "site_capacity"

    site_id: Mapped[str] = mapped_column(ForeignKey("sites.id"), primary_key=True)
    cpu_m_cap: Mapped[int] = mapped_column(BigInteger)
    cpu_m_used: Mapped[int] = mapped_column(BigInteger, default=0)
    cpu_m_external: Mapped[int] = mapped_column(BigInteger, default=0)
    mem_mib_cap: Mapped[int] = mapped_column(BigInteger)
    mem_mib_used: Mapped[int] = mapped_column(BigInteger, default=0)
    mem_mib_external: Mapped[int] = mapped_column(BigInteger, default=0)
    storage_gib_cap: Mapped[int] = mapped_column(BigInteger)
    storage_gib_used: Mapped[int] = mapped_column(BigInteger, default=0)
    storage_gib_external: Mapped[int] = mapped_column(BigInteger, default=0)


class SiteAccelerators(Base):
    __tablename__ = "site_accelerators"

    site_id: Mapped[str] = mapped_column(ForeignKey("sites.id"), primary_key=True)
    model: Mapped[str] = mapped_column(String(32), primary_key=True)
    cap: Mapped[int] = mapped_column(BigInteger)
    used: Mapped[int] = mapped_column(BigInteger, default=0)
    external: Mapped[int] = mapped_column(BigInteger, default=0)


class LinkCapacity(Base):
    __tablename__ = "link_capacity"

    link_id: Mapped[str] = mapped_column(ForeignKey("links.id"), primary_key=True)
    mbps_cap: Mapped[int] = mapped_column(BigInteger)
    mbps_used: Mapped[int] = mapped_column(BigInteger, default=0)
    mbps_external: Mapped[int] = mapped_column(BigInteger, default=0)


class PlacementRequestRecord(Base):
    """A tenant's request and where it stands: pending, placed, submitted, running,
    suspended, completed, failed, cancelled or rejected."""

    __tablename__ = "placement_requests"
    __table_args__ = (
        UniqueConstraint("tenant_id", "idempotency_key"),
        Index("ix_placement_requests_tenant_created", "tenant_id", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    body: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str | None] = mapped_column(Text)
    site_id: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class DecisionRecord(Base):
    """The decision for a request (a `cnbrain.domain.decision.Decision` as JSON)."""

    __tablename__ = "decisions"

    request_id: Mapped[str] = mapped_column(ForeignKey("placement_requests.id"), primary_key=True)
    document: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RequestEventRecord(Base):
    """One event of a request (a `cnbrain.domain.events.RequestEvent`): appended in the
    transaction of the change it tells of, never changed."""

    __tablename__ = "request_events"
    __table_args__ = (Index("ix_request_events_request_at", "request_id", "at", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(ForeignKey("placement_requests.id"))
    kind: Mapped[str] = mapped_column(String(32))
    at: Mapped[datetime]
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)


class ReservationRecord(Base):
    """Compute on one site and bandwidth on the links in `reservation_links`, held over the
    window [`start_at`, `end_at`) while `state` is held."""

    __tablename__ = "reservations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    request_id: Mapped[str] = mapped_column(ForeignKey("placement_requests.id"), index=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    site_id: Mapped[str] = mapped_column(ForeignKey("sites.id"), index=True)
    cpu_m: Mapped[int] = mapped_column(BigInteger)
    mem_mib: Mapped[int] = mapped_column(BigInteger)
    storage_gib: Mapped[int] = mapped_column(BigInteger)
    accelerator_model: Mapped[str | None] = mapped_column(String(32))
    accelerator_milli: Mapped[int] = mapped_column(BigInteger, default=0)
    mbps: Mapped[int] = mapped_column(BigInteger, default=0)
    start_at: Mapped[datetime]
    end_at: Mapped[datetime]
    state: Mapped[str] = mapped_column(String(16), default=ReservationState.HELD, index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    released_at: Mapped[datetime | None]


class ReservationLink(Base):
    __tablename__ = "reservation_links"

    reservation_id: Mapped[str] = mapped_column(ForeignKey("reservations.id"), primary_key=True)
    link_id: Mapped[str] = mapped_column(ForeignKey("links.id"), primary_key=True, index=True)


class ReservationFlow(Base):
    """A flow of reservation `reservation_id`'s request (`kind`: staging, stream, delivery or
    serving; `peer` its far end): `mbps` on every link of its route
    (`reservation_flow_links`) over [`start_at`, `end_at`). `reservation_id` is a held
    reservation's (`reservations`) or a cross-brain part's (`peer_reservations`), so it
    refers to neither table. `id` is the reservation's id and the flow's number. It holds
    until its window ends, not in the links' `used` columns: the calendar counts it over its
    window. Releasing the reservation or part deletes its flows, but its delivery when the
    job completed."""

    __tablename__ = "reservation_flows"

    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    reservation_id: Mapped[str] = mapped_column(String(64), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    peer: Mapped[str] = mapped_column(String(128))
    mbps: Mapped[int] = mapped_column(BigInteger)
    start_at: Mapped[datetime]
    end_at: Mapped[datetime] = mapped_column(index=True)


class NodeTakeRecord(Base):
    """What reservation or cross-brain part `holder_id` takes of node `node` of pool `pool`
    (indices into its site's `node_pools`) of site `site_id`: `devices` whole accelerators,
    `milli` of its accelerator `shared` (-1: none), `cpu_m` and `mem_mib`. It counts while
    its holder holds (a held reservation, a prepared or held part); releasing the holder
    deletes it. `holder_id` refers to neither table, as in `reservation_flows`."""

    __tablename__ = "node_takes"

    holder_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    pool: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[int] = mapped_column(Integer, primary_key=True)
    site_id: Mapped[str] = mapped_column(ForeignKey("sites.id"), index=True)
    devices: Mapped[int] = mapped_column(Integer)
    shared: Mapped[int] = mapped_column(Integer)
    milli: Mapped[int] = mapped_column(Integer)
    cpu_m: Mapped[int] = mapped_column(BigInteger)
    mem_mib: Mapped[int] = mapped_column(BigInteger)


class NodeReportRecord(Base):
    """What site `site_id`'s scheduler last reported free on the site's node pools, when, and
    until when it counts (`storage.node_reports`): `pools` is `{"pools": [{"name", "count",
    "units", "nodes_by_free"}, ...]}`, one entry per pool of the site's map entry then."""

    __tablename__ = "node_reports"

    site_id: Mapped[str] = mapped_column(ForeignKey("sites.id"), primary_key=True)
    pools: Mapped[dict[str, Any]]
    reported_at: Mapped[datetime]
    expires_at: Mapped[datetime]


class ReservationFlowLink(Base):
    """Link number `position` (from 0) of flow `flow_id`'s route."""

    __tablename__ = "reservation_flow_links"

    flow_id: Mapped[str] = mapped_column(ForeignKey("reservation_flows.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    link_id: Mapped[str] = mapped_column(ForeignKey("links.id"), index=True)


class PeerReservation(Base):
    """This brain's part of a reservation that spans brains, taken in two phases.

    Compute on one of this brain's sites (`site_id` None: a network-only part) and `mbps` on
    the links in `peer_reservation_links`; counted against the tenant's quota here when
    `counts_quota`, over the window [`start_at`, `end_at`). `state` is prepared (released by
    this brain once `expires_at` passes), held (committed) or released. The request and
    tenant live in the source brain, so they are plain ids here. Committing records the
    decision and the request.
    """

    __tablename__ = "peer_reservations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    request_id: Mapped[str] = mapped_column(String(64), index=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    site_id: Mapped[str | None] = mapped_column(ForeignKey("sites.id"), index=True)
    cpu_m: Mapped[int] = mapped_column(BigInteger, default=0)
    mem_mib: Mapped[int] = mapped_column(BigInteger, default=0)
    storage_gib: Mapped[int] = mapped_column(BigInteger, default=0)
    accelerator_model: Mapped[str | None] = mapped_column(String(32))
    accelerator_milli: Mapped[int] = mapped_column(BigInteger, default=0)
    mbps: Mapped[int] = mapped_column(BigInteger, default=0)
    start_at: Mapped[datetime]
    end_at: Mapped[datetime]
    counts_quota: Mapped[bool] = mapped_column(default=False)
    state: Mapped[str] = mapped_column(String(16), index=True)
    expires_at: Mapped[datetime | None] = mapped_column(index=True)
    decision: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    request: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    released_at: Mapped[datetime | None]


class PeerReservationLink(Base):
    __tablename__ = "peer_reservation_links"

    reservation_id: Mapped[str] = mapped_column(
        ForeignKey("peer_reservations.id"), primary_key=True
    )
    link_id: Mapped[str] = mapped_column(ForeignKey("links.id"), primary_key=True, index=True)


class JobStart(Base):
    """When the job of placed request `request_id` may be handed to its site's scheduler:
    `start_at`, once the data it stages is on the site (`Decision.starts_at`). A placed
    request without a row starts at once."""

    __tablename__ = "job_starts"

    request_id: Mapped[str] = mapped_column(ForeignKey("placement_requests.id"), primary_key=True)
    start_at: Mapped[datetime]


class JobRecord(Base):
    """One attempt to run a request's job on the cluster scheduler of a site.

    Attempts of a request are numbered from 1. `state` is queued (waiting for a dispatcher),
    submitting (a dispatcher is handing it to the scheduler), pending, running, suspended
    (the scheduler has it), or final: completed, failed, timeout, cancelled, lost (the
    scheduler no longer knows it) or not_submitted (the scheduler refused it or could not be
    reached). `owner` is the brain instance that follows the attempt, until `lease_until`;
    another instance takes it over once the lease lapses. `metered_at` is set once its usage
    record is written (or it is known that none will come). `reason` is why the brain ended
    it, when it did: `preempted` (its request was preempted; it does not count toward the
    job's `max_attempts`); null otherwise.
    """

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_state_owner", "state", "owner"),)

    request_id: Mapped[str] = mapped_column(ForeignKey("placement_requests.id"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    site_id: Mapped[str] = mapped_column(String(128))
    backend: Mapped[str] = mapped_column(String(16))
    backend_job_id: Mapped[str | None] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    backend_state: Mapped[str | None] = mapped_column(String(64))
    message: Mapped[str | None] = mapped_column(Text)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    owner: Mapped[str | None] = mapped_column(String(200))
    lease_until: Mapped[datetime | None]
    queued_at: Mapped[datetime] = mapped_column(default=utcnow)
    submitted_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    metered_at: Mapped[datetime | None]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    reason: Mapped[str | None] = mapped_column(String(16))


class UsageRecord(Base):
    """What one attempt of a request used, from its scheduler's own accounting, and its cost
    at the site's prices: `cost_cny` is `compute_cost_cny` (CPU, memory and accelerator hours)
    plus `network_cost_cny` (the reserved bandwidth on the path's links for the same time).
    `simulated` marks records of a simulator, whose times are simulated time."""

    __tablename__ = "usage_records"
    __table_args__ = (
        UniqueConstraint("request_id", "attempt"),
        Index("ix_usage_records_tenant_ended", "tenant_id", "ended_at"),
        ForeignKeyConstraint(["request_id", "attempt"], ["jobs.request_id", "jobs.attempt"]),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    request_id: Mapped[str] = mapped_column(ForeignKey("placement_requests.id"), index=True)
    attempt: Mapped[int | None] = mapped_column(Integer)
    site_id: Mapped[str] = mapped_column(String(128))
    backend_job_id: Mapped[str | None] = mapped_column(String(64))
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime] = mapped_column(index=True)
    elapsed_s: Mapped[float] = mapped_column(default=0.0, server_default="0")
    cpus: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    memory_mib: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    gpus: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    accelerator_model: Mapped[str | None] = mapped_column(String(32))
    bandwidth_gbps: Mapped[float] = mapped_column(default=0.0, server_default="0")
    cpu_core_hours: Mapped[float]
    memory_gib_hours: Mapped[float]
    accelerator_hours: Mapped[float]
    compute_cost_cny: Mapped[float] = mapped_column(default=0.0, server_default="0")
    network_cost_cny: Mapped[float] = mapped_column(default=0.0, server_default="0")
    cost_cny: Mapped[float]
    source: Mapped[str | None] = mapped_column(Text)
    simulated: Mapped[bool] = mapped_column(default=False, server_default=false())
    recorded_at: Mapped[datetime | None]


class AuditEntry(Base):
    """One state change or operator action: who did what to which object."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(64))
    tenant_id: Mapped[str | None] = mapped_column(String(64), index=True)
    action: Mapped[str] = mapped_column(String(64))
    object_type: Mapped[str] = mapped_column(String(32))
    object_id: Mapped[str] = mapped_column(String(260))
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)


class WeightRow(Base):
    """The operator's weight-matrix row for one workload class."""

    __tablename__ = "weight_matrix"

    workload_class: Mapped[str] = mapped_column(String(16), primary_key=True)
    cost: Mapped[float]
    latency: Mapped[float]
    energy: Mapped[float]
    balance: Mapped[float]


class PriorityClassRecord(Base):
    """An operator's priority class (`cnbrain.scheduling.classes.PriorityClass`); exactly one
    row is the default (`is_default`), the class of a request that names none. Values are
    unique: a lower class is a lower value."""

    __tablename__ = "priority_classes"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    value: Mapped[int] = mapped_column(Integer, unique=True)
    preemptible: Mapped[bool]
    default_max_wait_s: Mapped[float]
    is_default: Mapped[bool]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class LeaseRecord(Base):
    """A lease on one duty that one instance of a brain does at a time (say, its admission
    loop): `owner` holds it until `until`, and may renew it; another may take it after."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(128))
    until: Mapped[datetime]


class ReleaseBacklogRecord(Base):
    """A release the national brain owes an owner: the part of reservation `reservation_id`
    that `owner` could not release when asked (it was down or did not answer), to be
    released again with `reason` until it is; with `keep_delivery`, its delivery flows stay
    held (the job completed)."""

    __tablename__ = "release_backlog"

    owner: Mapped[str] = mapped_column(String(64), primary_key=True)
    reservation_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    reason: Mapped[str] = mapped_column(String(500))
    keep_delivery: Mapped[bool] = mapped_column(default=False, server_default=false())
    since: Mapped[datetime] = mapped_column(default=utcnow)


class KnownRegionRecord(Base):
    """A region registered with the national brain: where its brain answers and the
    provinces it owns (a JSON list), so that a restarted national brain knows it before it
    registers again."""

    __tablename__ = "known_regions"

    region_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    endpoint: Mapped[str] = mapped_column(String(255))
    provinces: Mapped[list[str]] = mapped_column(JSON)
    registered_at: Mapped[datetime] = mapped_column(default=utcnow)


class InFlightPlacementRecord(Base):
    """A cross-region placement of the national brain whose outcome is not decided yet: its
    reservation, its request, the owners of its parts (a JSON list) and the `replica` of the
    national brain deciding it, recorded before any part is prepared and deleted once every
    part is committed or released. A row whose replica stopped (its lease lapsed, or it
    started again) is released in every owner by a live replica."""

    __tablename__ = "inflight_placements"

    reservation_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    request_id: Mapped[str] = mapped_column(String(64))
    owners: Mapped[list[str]] = mapped_column(JSON)
    since: Mapped[datetime] = mapped_column(default=utcnow)
    replica: Mapped[str] = mapped_column(String(64), default="", server_default="")


class RoomHoldRecord(Base):
    """Room made on a site of this brain, by preemption, for request `request_id` of another
    region's queue: until `until`, every other request counts this compute on `site_id` as
    taken (`storage.room_holds`); deleted when the request takes compute here."""

    __tablename__ = "room_holds"

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    site_id: Mapped[str] = mapped_column(ForeignKey("sites.id"))
    cpu_m: Mapped[int] = mapped_column(BigInteger)
    mem_mib: Mapped[int] = mapped_column(BigInteger)
    storage_gib: Mapped[int] = mapped_column(BigInteger)
    accelerator_model: Mapped[str | None] = mapped_column(String(32))
    accelerator_milli: Mapped[int] = mapped_column(BigInteger, default=0)
    until: Mapped[datetime] = mapped_column(index=True)


class WaitPlanRecord(Base):
    """The national brain's plan of a waiting cross-region request of region `source_region`:
    what it holds (`demand`: a JSON list of [resource named by id, amount]) over
    `[start_at, end_at)`, on `nodes` nodes of its site, as planned at `planned_at`. Plans of
    other requests are taken from the calendar a request is planned on, and their gangs from
    the nodes of their sites, until they lapse or their request is placed."""

    __tablename__ = "wait_plans"

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    source_region: Mapped[str] = mapped_column(String(64))
    demand: Mapped[list[Any]] = mapped_column(JSON)
    start_at: Mapped[datetime]
    end_at: Mapped[datetime] = mapped_column(index=True)
    nodes: Mapped[int] = mapped_column(Integer, server_default="1")
    planned_at: Mapped[datetime] = mapped_column(index=True)


class QueuePlanRecord(Base):
    """Where a queued request stands in the admission queue, as the last admission round
    planned it: its `position` (0 first), its estimated start (None: no start within its
    max wait yet), and `detail` (what blocks it on its top candidates)."""

    __tablename__ = "queue_plans"

    request_id: Mapped[str] = mapped_column(ForeignKey("placement_requests.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    estimated_start_at: Mapped[datetime | None]
    planned_at: Mapped[datetime]
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)


class FairShareRecord(Base):
    """A tenant's terms in the admission queue (`cnbrain.storage.fair_shares.FairShare`): its
    fair-share `weight`, the `cohort` it lends and borrows quota in (None: none), and its
    `nominal` quota and `borrowing_limit` there, each a resource vector as
    {dimension: amount} in the ledger's units (`cnbrain.scheduling.resources`). A tenant
    without a row has the defaults: weight 1, no cohort."""

    __tablename__ = "fair_shares"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    weight: Mapped[float] = mapped_column(default=1.0, server_default="1")
    cohort: Mapped[str | None] = mapped_column(String(63))
    nominal: Mapped[dict[str, Any]]
    borrowing_limit: Mapped[dict[str, Any]]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class TenancyLogRecord(Base):
    """One change of the federation's tenancy (`cnbrain.domain.tenancy`) at `version`: in
    the national brain, the change as it recorded it (versions 1, 2, ... in commit order);
    in a regional brain, the changes it has taken from the national brain."""

    __tablename__ = "tenancy_log"

    version: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    change: Mapped[dict[str, Any]]
    recorded_at: Mapped[datetime] = mapped_column(default=utcnow)


class OwedNoteRecord(Base):
    """What became of a segment this brain re-routed (`message`, as on the wire), owed to the
    request's source region `region_id` until it is told (`storage.owed_notes`)."""

    __tablename__ = "owed_notes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    region_id: Mapped[str] = mapped_column(String(64))
    request_id: Mapped[str] = mapped_column(String(64))
    message: Mapped[bytes] = mapped_column(LargeBinary)
    since: Mapped[datetime] = mapped_column(default=utcnow)


class LinkStateRecord(Base):
    """An operator's last report of the state of link `link_id`: `down` (the brain's
    re-routing takes it for down, as it takes a link the data plane has down) or `up`, with
    its `reason`, the `actor` who made it and when (`storage.link_states`)."""

    __tablename__ = "link_states"

    link_id: Mapped[str] = mapped_column(ForeignKey("links.id"), primary_key=True)
    state: Mapped[str] = mapped_column(String(8))
    reason: Mapped[str] = mapped_column(String(500))
    actor: Mapped[str] = mapped_column(String(64))
    reported_at: Mapped[datetime] = mapped_column(default=utcnow)
