"""Settings of the national brain (CNBRAIN_* environment variables, optional YAML file)."""

from pydantic import Field

from cnbrain.federation.settings import BrainSettings


class NationalSettings(BrainSettings):
    """The defaults run the national brain of a local federation: SQLite file, gRPC on
    127.0.0.1:50051."""

    database_url: str = "sqlite+aiosqlite:///cnbrain-national.db"
    grpc_port: int | None = Field(default=50051, ge=0, le=65535)
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
