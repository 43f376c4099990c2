"""The REST API's own documents (the request and decision documents are the engine's)."""

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from cnbrain.domain import bounds
from cnbrain.domain.bounds import Name, control_free
from cnbrain.domain.decision import Candidate, Decision
from cnbrain.domain.events import RequestEventKind
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.states import AttemptState, RequestState
from cnbrain.execution import NodeReport
from cnbrain.regional.security import Role

EXAMPLE_REQUEST: dict[str, Any] = {
    "source_province": "ZJ",
    "resources": {"cpu": 32, "memory_gib": 256, "accelerator": {"model": "A100", "count": 8}},
    "constraints": {"max_latency_ms": 40, "min_bandwidth_gbps": 10, "interconnect": "ib"},
    "duration_hours": 24,
    "workload_class": "training",
    "objective": {"cost": 1, "latency": 0.5, "energy": 1.5, "balance": 1},
}


DisplayName = Annotated[
    str, StringConstraints(min_length=1, max_length=200), AfterValidator(control_free)
]
"""A tenant's or user's name: 1 to 200 characters, no control characters."""


class Strict(BaseModel):
    """A body: unknown fields are refused, every number is finite."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class QueueBlocker(BaseModel):
    """What keeps a queued request off one of its candidate sites now."""

    site: str
    resource: str = Field(
        description="The resource it lacks, with its unit, e.g. milli-accelerators H800."
    )
    wants: int = Field(description="What it wants of it, in that unit.")
    free: int = Field(description="What is free of it now, in that unit.")
    until: datetime | None = Field(
        description="From when enough of it is free for the whole duration; null: never "
        "(it asks more than the whole capacity)."
    )
    held_by: int = Field(description="How many jobs hold it now and end by then.")
    text: str


class QueueView(BaseModel):
    """Where a queued request stands, as the last admission round planned it."""

    position: int = Field(description="Its place in the admission order, 0 first.")
    estimated_start: datetime | None = Field(
        description="When it is planned to start; null: no start within its max wait yet."
    )
    site: str | None = Field(description="The site it is planned on, if any.")
    planned_at: datetime
    reason: str
    blockers: list[QueueBlocker] = Field(default_factory=list)


class FlowView(BaseModel):
    """A flow the request holds on the link calendars: `mbps` on every link of `links` from
    `start` to `end`."""

    kind: str = Field(description="staging, stream, delivery or serving.")
    peer: str = Field(description="Its far end: a site or a province.", examples=["site AA-dc"])
    mbps: int
    start: datetime
    end: datetime
    links: list[str]


class RouteSegmentView(BaseModel):
    """One segment of a route between sites, as its owner computed it."""

    kind: str = Field(description="source, backbone, destination, or local (one province).")
    owner: str = Field(description="The brain that computed it and owns its links.")
    latency_ms: float
    nodes: list[str]
    links: list[str]
    free_gbps: float | None = Field(
        description="The least free bandwidth of its links when computed (null: no link)."
    )


class SiteRouteView(BaseModel):
    latency_ms: float
    free_gbps: float | None = Field(
        description="The least free bandwidth of its links (null: no link, one site)."
    )
    segments: list[RouteSegmentView]


class SiteRoutes(BaseModel):
    """The best routes from one site to another, best first."""

    from_site: str
    to_site: str
    routes: list[SiteRouteView] = Field(
        description="Best first; empty when no route has the free bandwidth asked."
    )


class QueueEntry(BaseModel):
    """One queued request in the region's admission order."""

    id: str
    tenant: str
    priority_class: str | None = Field(
        description="The priority class it names; null: the default class."
    )
    submitted_at: datetime = Field(description="When it was submitted.")
    queued_at: datetime = Field(
        description="When it was queued: submitted to wait, or last preempted back into the "
        "queue. It waits since then (the queue's metrics count its wait from it too)."
    )
    position: int = Field(description="Its place in the admission order, 0 first.")
    estimated_start: datetime | None
    site: str | None
    reason: str
    planned_at: datetime


class QueuePage(BaseModel):
    items: list[QueueEntry]
    next_after: int | None = Field(
        description="Pass as `after` for the next page; null at the end."
    )


class RequestView(BaseModel):
    """A request as the brain holds it: its state, why, the decision, and, while it waits in
    the admission queue, where it stands there."""

    id: str
    tenant: str
    state: RequestState = Field(description=f"One of: {', '.join(RequestState)}.")
    reason: str | None = Field(
        description="Why it was rejected or failed, or what became of its job's last attempt."
    )
    site: str | None
    created_at: datetime
    updated_at: datetime
    request: PlacementRequest | None = Field(
        description="The request as submitted; null when its stored form is no longer a valid "
        "request (stored by an earlier version, outside today's bounds)."
    )
    decision: Decision | None
    queue: QueueView | None = None
    flows: list[FlowView] = Field(
        default_factory=list,
        description="The flows it holds on the link calendars, by start, until each ends "
        "(GET /v1/requests/{id} only): its staging runs before its job starts, its delivery "
        "after the job ends.",
    )


MAX_GROUP_MEMBERS = 64
"""Requests of one group."""


def _new_group_id() -> str:
    return f"grp-{uuid.uuid4().hex[:12]}"


class RequestGroupBody(Strict):
    """Related requests placed all or none (docs/placement.md): `together` on one site (or,
    with scope `province`, in one province), or `spread`, each on a site of its own."""

    id: Name = Field(default_factory=_new_group_id, min_length=1, description="The group's name.")
    placement: Literal["together", "spread"]
    scope: Literal["site", "province"] = Field(
        default="site", description="Where `together` keeps the members: one site or province."
    )
    requests: list[dict[str, Any]] = Field(
        min_length=2,
        max_length=MAX_GROUP_MEMBERS,
        description="The members, each a placement request that starts now.",
    )


class RequestGroupView(BaseModel):
    """A group as decided: every member placed, or every member rejected with the reason."""

    id: str
    placement: str
    scope: str
    state: Literal["placed", "rejected"]
    reason: str | None
    requests: list[RequestView]


class RequestPage(BaseModel):
    items: list[RequestView]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null at the end."
    )


class Quote(BaseModel):
    """What the brain would decide now; nothing is reserved."""

    decision: Decision
    alternatives: list[Candidate] = Field(description="The other candidates with their objective.")
    notes: list[str] = Field(
        default_factory=list,
        description="Who made the quote when not this brain alone: the national brain, for a "
        "request that no site of this region fits (or that asks for the national optimum), "
        "or that it could not be reached.",
    )


class TenantCreate(Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{1,62}$", examples=["acme-ai"])
    name: DisplayName = Field(examples=["ACME AI Lab"])


class TenantView(BaseModel):
    id: str
    name: str
    created_at: datetime


class UserCreate(Strict):
    name: DisplayName = Field(examples=["alice"])
    role: Role = Field(examples=[Role.TENANT_USER])
    tenant: Name | None = Field(
        default=None, description="Required for tenant roles; none for staff."
    )


class UserView(BaseModel):
    id: str
    name: str
    role: Role
    tenant: str | None
    disabled_at: datetime | None = Field(
        default=None, description="When the user was disabled (none of its keys works since)."
    )


class ApiKeyView(BaseModel):
    id: str
    user: str
    token: str = Field(description="The bearer token; shown only in this answer.")


class ApiKeyInfo(BaseModel):
    """An API key without its secret."""

    id: str = Field(description="The key's id: the token's part before the dot.")
    user: str
    created_at: datetime
    revoked_at: datetime | None = Field(description="When it was revoked; null: it is valid.")


class QuotaBody(Strict):
    """Limits of a tenant's held reservations; null means unlimited. At most what a whole map
    holds (`cnbrain.domain.bounds`)."""

    cpu_cores: float | None = Field(
        default=None, ge=0, le=bounds.MAX_QUOTA_CPU_CORES, examples=[2048]
    )
    memory_gib: float | None = Field(
        default=None, ge=0, le=bounds.MAX_QUOTA_MEMORY_GIB, examples=[16384]
    )
    accelerators: int | None = Field(
        default=None, ge=0, le=bounds.MAX_QUOTA_ACCELERATORS, examples=[256]
    )
    bandwidth_gbps: float | None = Field(
        default=None, ge=0, le=bounds.MAX_QUOTA_BANDWIDTH_GBPS, examples=[400]
    )
    active_requests: int | None = Field(
        default=None, ge=0, le=bounds.MAX_QUOTA_ACTIVE_REQUESTS, examples=[1000]
    )


class QuotaUse(QuotaBody):
    """Limits and what a tenant's held reservations use of them."""

    used_cpu_cores: float
    used_memory_gib: float
    used_accelerators: float = Field(description="Accelerators held; fractions count their share.")
    used_bandwidth_gbps: float
    used_active_requests: int


class QuotaView(QuotaUse):
    """A tenant's limits on this brain's ledger and what its held reservations there use; in
    a federation, with the national limits on its use summed over every region."""

    region: str | None = Field(
        default=None, description="The region these limits hold in; null: a standalone brain."
    )
    national: QuotaBody | None = Field(
        default=None,
        description="The federation's limits on the tenant's use summed over every region; "
        "null: none set, or a standalone brain. A tenant with one is placed by the national "
        "brain, which holds it to them.",
    )


class SiteUsageReport(Strict):
    """Capacity of a site in use outside this brain, as the site reports it (算力感知); at most
    one site's bounds (`cnbrain.domain.bounds`)."""

    cpu_cores: float = Field(ge=0, le=bounds.MAX_CPU_CORES)
    memory_gib: float = Field(ge=0, le=bounds.MAX_MEMORY_GIB)
    storage_gib: float = Field(default=0.0, ge=0, le=bounds.MAX_STORAGE_GIB)
    accelerators: dict[Name, Annotated[int, Field(ge=0, le=bounds.MAX_ACCELERATORS)]] = Field(
        default_factory=dict
    )


class PoolView(BaseModel):
    """One node pool of a site: its nodes' shape and count, and what the brain's own
    reservations leave free on it: `nodes_by_free[k]` nodes with k accelerators free (whole
    cores, in a CPU pool), and `shared_by_free`, [free milli-accelerators, accelerators] of
    the accelerators that fractions share. `reported_nodes_by_free` is the same count as the
    site's scheduler last reported it, while that report counts (null: none does), and
    `reported_shared_by_free` its shared accelerators, when the site cuts its accelerators
    into shards (null otherwise); placement sees, for every k, the fewer nodes with k or more
    free of the two, once the report is taken less the brain's reservations whose jobs it
    does not show running yet, and likewise for the shared accelerators. `held`, in an
    accelerator pool: [accelerators, milli-accelerators, node takes] of each shape the
    reservations hold on its nodes, the mix against which the brain places the next gangs
    where they fragment least."""

    name: str
    count: int
    cpu_cores: float
    memory_gib: float
    accelerator: str | None
    accelerators: int
    nodes_by_free: list[int]
    shared_by_free: list[tuple[int, int]]
    reported_nodes_by_free: list[int] | None = None
    reported_shared_by_free: list[tuple[int, int]] | None = None
    held: list[tuple[int, int, int]] = []


class SiteNodesView(BaseModel):
    """A site's nodes: its pools as the brain keeps them, and the nodes as the site's own
    scheduler reports them now (`reported`; null when it reports none: a simulator, or
    `reported_error` says why it could not be read)."""

    site: str
    pools: list[PoolView]
    reported: list[NodeReport] | None
    reported_error: str | None = None


class LinkUsageReport(Strict):
    """Bandwidth of a link in use outside this brain; at most one link's bound."""

    bandwidth_gbps: float = Field(ge=0, le=bounds.MAX_BANDWIDTH_GBPS)


class LinkStateReport(Strict):
    """An operator's report of a link's state: down (it carries nothing: the reservations
    over it are re-routed, and no new or re-routed path takes it) or up again."""

    state: Literal["down", "up"]
    reason: Annotated[
        str, StringConstraints(max_length=bounds.MAX_LINK_REASON), AfterValidator(control_free)
    ] = Field(default="", description="Why, in the operator's words.")


class LinkStateView(BaseModel):
    """A link's state as reported, and which brain keeps the report."""

    link: str
    owner: str = Field(description="The link's owner: a region id, or national (backbone).")
    state: Literal["down", "up"]
    reason: str
    kept_by: str = Field(
        description="The brain that keeps the report and re-routes off the link: this brain "
        "(its region id, or standalone), or national for a backbone link, which this brain "
        "forwards to the national brain."
    )
    reported_at: datetime


class AuditView(BaseModel):
    id: int
    at: datetime
    actor: str
    tenant: str | None
    action: str
    object_type: str
    object_id: str
    detail: dict[str, Any]


class AuditPage(BaseModel):
    items: list[AuditView]
    next_cursor: str | None


class LedgerFinding(BaseModel):
    """One thing the ledger auditor found wrong."""

    kind: str = Field(
        description="over_commit, used_mismatch, ended_request, not_runnable, "
        "expired_prepared, not_live_at_source or unverified.",
        examples=["not_live_at_source"],
    )
    object_id: str = Field(description="The resource, reservation or part it is about.")
    request_id: str | None = None
    detail: str


class LedgerAuditView(BaseModel):
    """The ledger auditor's last audit of this brain's ledger, and its counts since the
    brain started."""

    audited_at: datetime | None = Field(description="None: no audit has run yet.")
    audits: int = Field(description="Audits since the brain started.")
    interval_s: float
    grace_s: float
    found: dict[str, int] = Field(description="The last audit's findings, per kind.")
    repaired: dict[str, int] = Field(description="What the last audit released, per kind.")
    found_total: dict[str, int] = Field(description="Findings of every audit, per kind.")
    repaired_total: dict[str, int] = Field(description="Releases of every audit, per kind.")
    findings: list[LedgerFinding] = Field(description="The last audit's findings (100 at most).")
    repairs: list[LedgerFinding] = Field(description="The last audit's releases (100 at most).")


class Health(BaseModel):
    status: str
    instance: str
    map: str | None = None
    sites: int | None = None
    region: str | None = Field(default=None, description="The region owned; None: standalone.")
    national_registered: bool | None = Field(
        default=None,
        description="Whether the national brain (one of its replicas, at least) has this "
        "region registered.",
    )
    national_replicas_registered: int | None = Field(
        default=None,
        description="How many of the national brain's replicas have this region registered, "
        "of the `national_endpoint`s it knows.",
    )


class AttemptView(BaseModel):
    """One attempt to run a request's job on its site's cluster scheduler."""

    attempt: int = Field(description="1 for the first attempt.", examples=[1])
    site: str
    backend: str = Field(description="slurm, or simulator (nothing runs).", examples=["slurm"])
    backend_job_id: str | None = Field(
        description="The scheduler's id of the job; null until submitted.", examples=["4711"]
    )
    state: AttemptState = Field(
        description=f"One of: {', '.join(AttemptState)}.", examples=["running"]
    )
    backend_state: str | None = Field(
        description="The scheduler's own word for the state.", examples=["RUNNING"]
    )
    message: str | None = Field(description="What the scheduler (or the brain) said last.")
    reason: str | None = Field(
        default=None,
        description="Why the brain ended it, when it did: preempted (its request was "
        "preempted; it does not count toward max_attempts); null otherwise.",
        examples=[None, "preempted"],
    )
    exit_code: int | None
    queued_at: datetime
    submitted_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None


class AttemptList(BaseModel):
    request: str
    state: str = Field(description="The request's state.")
    max_attempts: int | None = Field(description="The request's limit; null: it has no job.")
    attempts: list[AttemptView]


class RequestEventView(BaseModel):
    """One thing that happened to a request (see docs/regional-brain.md, "Events")."""

    kind: RequestEventKind = Field(
        description=f"One of: {', '.join(RequestEventKind)}.", examples=["placed"]
    )
    at: datetime
    detail: dict[str, str | int | float | bool] = Field(
        description="What the event names: the site, the attempt, the reason...",
        examples=[{"site": "ZJ-hz-1"}],
    )


class RequestEventList(BaseModel):
    request: str
    events: list[RequestEventView] = Field(description="Oldest first.")


class UsageView(BaseModel):
    """What one attempt used, from its scheduler's accounting, and its cost."""

    id: int
    tenant: str
    request: str
    attempt: int | None
    site: str
    backend_job_id: str | None
    simulated: bool = Field(description="From a simulator: nothing ran, times are simulated.")
    started_at: datetime
    ended_at: datetime
    elapsed_s: float
    cpus: int
    memory_mib: int
    gpus: int
    accelerator_model: str | None
    bandwidth_gbps: float
    cpu_core_hours: float
    memory_gib_hours: float
    accelerator_hours: float
    compute_cost_cny: float
    network_cost_cny: float
    cost_cny: float
    source: str | None = Field(description="The accounting the record comes from.")


class UsageTotals(BaseModel):
    records: int
    elapsed_s: float
    cpu_core_hours: float
    memory_gib_hours: float
    accelerator_hours: float
    compute_cost_cny: float
    network_cost_cny: float
    cost_cny: float


class UsagePage(BaseModel):
    """The usage records of jobs that ended in [from, to), one page, with the period's totals."""

    tenant: str | None = Field(description="The tenant; null: every tenant (staff).")
    start: datetime = Field(serialization_alias="from", description="Start (inclusive).")
    end: datetime = Field(serialization_alias="to", description="End (exclusive).")
    totals: UsageTotals
    items: list[UsageView]
    next_cursor: str | None


class UsageReportRow(UsageTotals):
    tenant: str
    site: str
    simulated: bool


class UsageReport(BaseModel):
    """Per tenant: the usage of jobs that ended in [from, to), by site and kind of scheduler,
    and the tenant's totals."""

    start: datetime = Field(serialization_alias="from", description="Start (inclusive).")
    end: datetime = Field(serialization_alias="to", description="End (exclusive).")
    rows: list[UsageReportRow]
    tenants: dict[str, UsageTotals] = Field(description="Each tenant's totals over its rows.")


class Amounts(BaseModel):
    """Amounts of a site's resources; accelerators by model, in whole accelerators (a share
    of one is a fraction)."""

    cpu_cores: float
    memory_gib: float
    storage_gib: float
    accelerators: dict[str, float]


class SiteCapacityView(BaseModel):
    """A site with its capacity and what the brain's reservations (and capacity reported in
    use outside it) leave free now."""

    id: str
    name: str
    province: str
    region: str
    kind: str
    capacity: Amounts
    free: Amounts
    utilisation: float = Field(
        description="The highest share of its CPU, memory, storage or any accelerator model "
        "in use, 0 to 1."
    )


class LinkUseView(BaseModel):
    """A link with its capacity and the bandwidth reserved on it now."""

    id: str
    a: str
    b: str
    layer: str
    owner: str
    latency_ms: float
    capacity_gbps: float
    used_gbps: float
    free_gbps: float
    utilisation: float = Field(description="Reserved bandwidth over capacity, 0 to 1.")
