"""Settings of a regional brain, from the environment (CNBRAIN_*) and an optional YAML file."""

import os
import socket
from pathlib import Path

from pydantic import Field, SecretStr, field_validator

from cnbrain.execution.credentials import Credential, CredentialName
from cnbrain.federation.settings import BrainSettings
from cnbrain.rpc.failover import endpoints_of


class Settings(BrainSettings):
    """Environment variables override the file named by CNBRAIN_CONFIG_FILE, which overrides
    the defaults. The defaults are the embedded first run: SQLite file, in-process cache, and
    a standalone brain that owns every province of its map.

    With `region`, the brain is one member of a federation: it owns that region's provinces,
    places locally what it can, and escalates the rest to the national brain at
    `national_endpoint`; its gRPC server (`grpc_port`) answers the national brain."""

    database_url: str = "sqlite+aiosqlite:///cnbrain-regional.db"
    redis_url: str | None = Field(default=None, description="None: in-process cache (one replica).")
    region: str | None = Field(default=None, description="None: standalone, owns the whole map.")
    national_endpoint: str | None = Field(
        default=None,
        max_length=2048,
        description="host:port of the national brain's gRPC server; for a national brain of "
        "several replicas, theirs separated by commas, in the order of preference.",
    )
    advertise_endpoint: str | None = Field(
        default=None, description="host:port the national brain reaches this brain at."
    )
    summary_interval_s: float = Field(default=2.0, gt=0)
    tenancy_interval_s: float = Field(
        default=2.0,
        ge=0.1,
        le=60,
        description=(
            "How often a federated brain takes the federation's tenancy changes from the "
            "national brain: a key created or revoked on another brain holds here within it."
        ),
    )
    instance_id: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    metrics_host: str = Field(
        default="127.0.0.1",
        max_length=255,
        description="Where the metrics listener answers GET /metrics: loopback by default, "
        "since the page tells what the REST API shows to staff only.",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="The metrics listener's port (GET /metrics, Prometheus), apart from the "
        "REST port; 0: a free one; None: no listener.",
    )
    max_body_bytes: int = Field(
        default=1 << 20,
        ge=1024,
        le=1 << 30,
        description="Largest request body accepted; a larger one is answered 413.",
    )
    rate_limit_per_minute: int = Field(default=6000, ge=1)
    idempotency_ttl_s: int = Field(default=86_400, ge=60)
    placement_attempts: int = Field(
        default=5, ge=1, description="Plans tried per request under contention."
    )
    admin_token_file: Path = Field(
        default=Path("cnbrain-admin.token"),
        description="Where the first start writes the admin's API key.",
    )
    admin_token: SecretStr | None = Field(
        default=None, description="Admin API key to install on first start instead of a new one."
    )
    bus_namespace: str = Field(
        default="default", description="Replicas sharing a database share this."
    )
    execution_poll_s: float = Field(
        default=2.0, gt=0, le=300, description="How often the dispatcher asks schedulers."
    )
    execution_lease_s: float = Field(
        default=30.0,
        gt=0,
        description="How long a brain instance keeps the jobs it follows without renewing; "
        "another instance takes them over after that.",
    )
    node_report_interval_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="How often the dispatcher reads what the schedulers of sites with node "
        "pools report of their nodes; a report counts for three intervals.",
    )
    credentials: dict[CredentialName, Credential] = Field(
        default_factory=dict,
        description="The credential store: name -> {url, token_file}. A Slurm site names one "
        "of these; its token is read from token_file and sent only to url and below.",
    )
    metering_wait_s: float = Field(
        default=600.0,
        gt=0,
        description="How long to wait for a scheduler's accounting of an ended job.",
    )
    admission_interval_s: float = Field(
        default=5.0,
        gt=0,
        le=300,
        description="How often the admission loop plans the queue when nothing wakes it "
        "sooner (capacity freed, a request queued).",
    )
    admission_lease_s: float = Field(
        default=15.0,
        gt=0,
        le=3600,
        description="How long the instance running the region's admission loop holds it "
        "without renewing; another instance takes it over after that.",
    )
    admission_top_n: int = Field(
        default=5, ge=1, le=50, description="Candidate sites planned for each queued request."
    )
    max_queued_per_tenant: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Requests one tenant may have waiting in the admission queue; one more "
        "that asks to wait is refused (409).",
    )

    @field_validator("national_endpoint")
    @classmethod
    def _endpoints(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        endpoints_of(value)
        return value

    @property
    def national_endpoints(self) -> list[str]:
        """The national brain's replicas, in the order of preference ([] when none)."""
        return endpoints_of(self.national_endpoint) if self.national_endpoint else []
