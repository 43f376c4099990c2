"""What a job moves over the network, and when: its flows.

A job's flows replace one constant bandwidth held for its whole life:

- **staging** (`Staging`): a dataset of `volume_gb` at a site or in a province that must reach
  the compute site. `before_start`: sent before the job starts, at a rate the planner chooses
  up to `max_rate_gbps`, so the transfer takes `volume_gb * 8 / rate` seconds and the job
  starts when it ends. `stream`: read while the job runs, at `volume_gb * 8 / duration` Gbps
  for the job's whole run;
- **result delivery** (`Delivery`): `volume_gb` sent to a site or province after the job
  ends, at a rate the planner chooses up to `max_rate_gbps`;
- **serving traffic** (`Serving`): `rate_gbps` from each of the users' provinces to the
  compute site for the job's whole run, each path within `max_latency_ms`;
- **continuous bandwidth**: the request's `min_bandwidth_gbps` from its access node, for the
  job's whole run, only where a job truly needs one.

A flow's far end is a site (`site`, by id) or a province (`province`, by code: its first
access node), exactly one of the two. Volumes are decimal gigabytes (10^9 bytes); rates are
Gbps. Every number is finite and bounded (`cnbrain.domain.bounds`).
"""

from typing import Literal, Self

from pydantic import Field, model_validator

from cnbrain.domain import bounds
from cnbrain.domain.bounds import Name
from cnbrain.domain.model import DomainModel

StagingMode = Literal["before_start", "stream"]


class Endpoint(DomainModel):
    """A flow's far end: a site (by id) or a province (by code), exactly one."""

    site: Name | None = Field(default=None, min_length=1)
    province: Name | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.site is None) == (self.province is None):
            raise ValueError("name exactly one of site and province")
        return self

    def __str__(self) -> str:
        return f"site {self.site}" if self.site is not None else f"province {self.province}"


class Transfer(DomainModel):
    """Data moved at a rate the planner chooses, up to `max_rate_gbps` (none: any rate the
    route's links have)."""

    volume_gb: float = Field(
        gt=0,
        le=bounds.MAX_VOLUME_GB,
        strict=True,
        allow_inf_nan=False,
        description="Data moved, GB (10^9 bytes).",
    )
    max_rate_gbps: float | None = Field(
        default=None,
        gt=0,
        le=bounds.MAX_BANDWIDTH_GBPS,
        strict=True,
        allow_inf_nan=False,
        description="The highest rate of the transfer (for a stream: not used); none: any.",
    )


class Staging(Transfer):
    """A dataset at `source` that the job reads (module docstring)."""

    source: Endpoint
    mode: StagingMode = "before_start"


class Delivery(Transfer):
    """Results sent to `destination` after the job ends (module docstring)."""

    destination: Endpoint


class Serving(DomainModel):
    """Users' traffic to a service or inference job for its whole run (module docstring)."""

    provinces: tuple[Name, ...] = Field(min_length=1, max_length=bounds.MAX_REGIONS)
    rate_gbps: float = Field(
        gt=0,
        le=bounds.MAX_BANDWIDTH_GBPS,
        strict=True,
        allow_inf_nan=False,
        description="Bandwidth from each province, Gbps.",
    )
    max_latency_ms: float = Field(gt=0, le=bounds.MAX_LATENCY_MS, strict=True, allow_inf_nan=False)

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        if len(set(self.provinces)) != len(self.provinces):
            raise ValueError("provinces must not repeat")
        return self


class Flows(DomainModel):
    """Everything a job moves besides its continuous bandwidth."""

    staging: tuple[Staging, ...] = Field(default=(), max_length=bounds.MAX_FLOWS)
    delivery: tuple[Delivery, ...] = Field(default=(), max_length=bounds.MAX_FLOWS)
    serving: Serving | None = None

    @property
    def empty(self) -> bool:
        return not self.staging and not self.delivery and self.serving is None
