"""Settings of the national brain (CNBRAIN_* environment variables, optional YAML file)."""

import os
import socket

from pydantic import Field

from cnbrain.federation.settings import BrainSettings


class NationalSettings(BrainSettings):
    """The defaults run the national brain of a local federation: SQLite file, gRPC on
    127.0.0.1:50051."""

    database_url: str = "sqlite+aiosqlite:///cnbrain-national.db"
    grpc_port: int | None = Field(default=50051, ge=0, le=65535)
    http_host: str = Field(default="127.0.0.1", max_length=255)
    http_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Where the HTTP listener answers GET /metrics (Prometheus) and /healthz; "
        "None: no HTTP listener.",
    )
    top_regions: int = Field(default=3, ge=1, description="Regions asked for candidates.")
    sites_per_region: int = Field(default=8, ge=1, description="Candidates asked of each.")
    paths_per_segment: int = Field(default=3, ge=1)
    candidate_deadline_s: float = Field(
        default=1.0, gt=0, description="Deadline of the parallel candidate and segment calls."
    )
    prepare_ttl_ms: int = Field(
        default=10_000, ge=100, le=600_000, description="Life of a prepared, uncommitted part."
    )
    placement_attempts: int = Field(default=3, ge=1)
    summary_interval_ms: int = Field(default=2_000, ge=100)
    instance_id: str = Field(
        default_factory=lambda: f"{socket.gethostname()[:32]}-{os.getpid()}",
        min_length=1,
        max_length=48,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Names this replica among the national brain's replicas on one database; "
        "a replica started again under the same id takes back what it left under way at once.",
    )
    wait_plan_ttl_s: float = Field(
        default=60.0,
        ge=1,
        le=3600,
        description="How long the plan of a waiting cross-region request holds its room for "
        "the requests planned after it without its source region asking again.",
    )
    replica_lease_s: float = Field(
        default=15.0,
        ge=0.5,
        le=3600,
        description="How long a replica is taken to be alive without renewing its lease: the "
        "placements a replica left under way are released by another once its lease lapsed, "
        "and the duties that one replica does at a time pass to another then.",
    )
