"""A tenant's placement request: what it needs, its constraints and what it optimises for."""

import re
import uuid
from typing import Annotated, Final, Literal

from pydantic import Field, ValidationInfo, field_validator

from cnbrain.domain import bounds
from cnbrain.domain.accelerators import (
    ACCELERATOR_MEMORY_GIB,
    MAX_DEVICE_MEMORY_GIB,
    MILLI,
    memory_milli,
)
from cnbrain.domain.bounds import Name, Text
from cnbrain.domain.enums import CpuArch, Interconnect, Objective, WorkloadClass
from cnbrain.domain.flows import Flows
from cnbrain.domain.model import DomainModel


class AcceleratorDemand(DomainModel):
    """`count` whole accelerators of `model` on each node; or a fraction of one accelerator,
    which the job shares with others (count 1, one node): `milli` thousandths of it, or
    `memory_gib` of its device memory (`fraction_milli`)."""

    model: Name = Field(min_length=1, description="Accelerator model from the catalog, e.g. A100.")
    count: int = Field(
        default=1,
        strict=True,
        ge=1,
        le=bounds.MAX_ACCELERATORS,
        description="Accelerators on each node.",
    )
    milli: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        lt=MILLI,
        description="A fraction of one accelerator, in thousandths (1 to 999), on a device "
        "other jobs may share; with count 1 on one node. None: whole accelerators.",
    )

    memory_gib: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DEVICE_MEMORY_GIB,
        strict=True,
        allow_inf_nan=False,
        description="A fraction of one accelerator stated as device memory (GiB), instead of "
        "milli: the share is this over the model's device memory in the catalog, rounded up "
        "to a thousandth; less than the whole device, with count 1 on one node.",
    )

    @field_validator("milli")
    @classmethod
    def _one_device(cls, milli: int | None, info: ValidationInfo) -> int | None:
        if milli is not None and info.data.get("count", 1) != 1:
            raise ValueError("a fraction is of one accelerator: count must be 1")
        return milli

    @field_validator("memory_gib")
    @classmethod
    def _part_of_one_device(cls, memory_gib: float | None, info: ValidationInfo) -> float | None:
        if memory_gib is None:
            return None
        if info.data.get("milli") is not None:
            raise ValueError("a fraction is milli or memory_gib, not both")
        if info.data.get("count", 1) != 1:
            raise ValueError("a fraction is of one accelerator: count must be 1")
        model = info.data.get("model")
        if not isinstance(model, str) or model not in ACCELERATOR_MEMORY_GIB:
            raise ValueError(f"the device memory of model {model!r} is not in the catalog")
        device = ACCELERATOR_MEMORY_GIB[model]
        if memory_milli(model, memory_gib) >= MILLI:
            raise ValueError(
                f"{memory_gib:g} GiB is all of one {model} ({device:g} GiB): ask for whole "
                "accelerators instead"
            )
        return memory_gib

    @property
    def fraction_milli(self) -> int | None:
        """The fraction of one accelerator asked, in thousandths: `milli`, or `memory_gib`
        over the model's device memory rounded up; None for whole accelerators."""
        if self.memory_gib is not None:
            return memory_milli(self.model, self.memory_gib)
        return self.milli

    @property
    def per_node_milli(self) -> int:
        """What each node holds, in thousandths of an accelerator."""
        fraction = self.fraction_milli
        return fraction if fraction is not None else self.count * MILLI


class ResourceDemand(DomainModel):
    """What a request holds on one site: `nodes` nodes (a gang: all of them or none, on one
    interconnect fabric), each with `cpu` cores, `memory_gib` and `accelerator`; and
    `storage_gib` of the site's storage for the whole job. The `total_*` amounts are what
    the ledgers and quotas count; each is bounded like one site's capacity."""

    cpu: float = Field(
        ge=0,
        le=bounds.MAX_CPU_CORES,
        description="CPU cores on each node (fractions allowed).",
        strict=True,
        allow_inf_nan=False,
    )
    memory_gib: float = Field(
        ge=0,
        le=bounds.MAX_MEMORY_GIB,
        strict=True,
        allow_inf_nan=False,
        description="Memory on each node (GiB).",
    )
    accelerator: AcceleratorDemand | None = None
    nodes: int = Field(
        default=1,
        strict=True,
        ge=1,
        le=bounds.MAX_NODES,
        description="Nodes of the gang, each with the CPU, memory and accelerators above.",
    )
    storage_gib: float = Field(
        default=0.0,
        ge=0,
        le=bounds.MAX_STORAGE_GIB,
        strict=True,
        allow_inf_nan=False,
        description="Storage of the whole job (GiB).",
    )

    @field_validator("nodes")
    @classmethod
    def _totals_bounded(cls, nodes: int, info: ValidationInfo) -> int:
        accelerator = info.data.get("accelerator")
        if accelerator is not None and accelerator.fraction_milli is not None and nodes != 1:
            raise ValueError("a fraction of one accelerator runs on one node")
        for what, per_node, bound in (
            ("CPU cores", info.data.get("cpu", 0.0), bounds.MAX_CPU_CORES),
            ("GiB memory", info.data.get("memory_gib", 0.0), bounds.MAX_MEMORY_GIB),
            ("accelerators", accelerator.count if accelerator else 0, bounds.MAX_ACCELERATORS),
        ):
            if nodes * per_node > bound:
                raise ValueError(
                    f"{nodes} nodes x {per_node:g} {what} is more than one site may hold "
                    f"({bound:g})"
                )
        return nodes

    @classmethod
    def of_totals(
        cls,
        *,
        cpu: float,
        memory_gib: float,
        model: str | None = None,
        count: int = 0,
        milli: int | None = None,
        per_node: int = 8,
    ) -> "ResourceDemand":
        """A job's totals as a gang: nodes of `per_node` accelerators each, with its CPU and
        memory shared evenly, when `count` is a larger multiple of `per_node`; else one
        node with all of it. `milli` asks that fraction of one accelerator instead."""
        nodes = count // per_node if count > per_node and count % per_node == 0 else 1
        accelerator: dict[str, object] | None = (
            {"model": model, "count": count // nodes} if model and count else None
        )
        if accelerator is not None and milli is not None:
            accelerator["milli"] = milli
        return cls.model_validate(
            {
                "nodes": nodes,
                "cpu": cpu / nodes,
                "memory_gib": memory_gib / nodes,
                "accelerator": accelerator,
            }
        )

    @property
    def total_cpu(self) -> float:
        return self.nodes * self.cpu

    @property
    def total_memory_gib(self) -> float:
        return self.nodes * self.memory_gib

    @property
    def total_accelerator_milli(self) -> int:
        """All the gang's accelerators, in thousandths of one."""
        return self.nodes * self.accelerator.per_node_milli if self.accelerator else 0

    @property
    def total_accelerators(self) -> float:
        """All the gang's accelerators (a fraction of one for a fraction)."""
        return self.total_accelerator_milli / MILLI


class Constraints(DomainModel):
    """Hard constraints. Region lists name provinces by code or regions by id."""

    max_latency_ms: float | None = Field(
        default=None, gt=0, le=bounds.MAX_LATENCY_MS, strict=True, allow_inf_nan=False
    )
    min_bandwidth_gbps: float = Field(
        default=0.0,
        ge=0,
        le=bounds.MAX_BANDWIDTH_GBPS,
        description="Bandwidth reserved on every link of the path.",
        strict=True,
        allow_inf_nan=False,
    )
    regions_allowed: tuple[Name, ...] = Field(default=(), max_length=bounds.MAX_REGIONS)
    regions_denied: tuple[Name, ...] = Field(default=(), max_length=bounds.MAX_REGIONS)
    cpu_arch: CpuArch | None = None
    interconnect: Interconnect | None = Field(
        default=None, description="Weakest acceptable interconnect: ethernet < roce < ib."
    )
    labels: dict[Name, Name] = Field(
        default_factory=dict,
        max_length=bounds.MAX_LABELS,
        description="Labels the site must carry.",
    )


class ObjectiveWeights(DomainModel):
    """Non-negative weights of the objective terms; they need not sum to one."""

    cost: float = Field(default=1.0, ge=0, le=bounds.MAX_WEIGHT, strict=True, allow_inf_nan=False)
    latency: float = Field(
        default=1.0, ge=0, le=bounds.MAX_WEIGHT, strict=True, allow_inf_nan=False
    )
    energy: float = Field(default=1.0, ge=0, le=bounds.MAX_WEIGHT, strict=True, allow_inf_nan=False)
    balance: float = Field(
        default=1.0, ge=0, le=bounds.MAX_WEIGHT, strict=True, allow_inf_nan=False
    )

    def of(self, objective: Objective) -> float:
        return float(getattr(self, objective.value))


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class JobPart(DomainModel):
    """What the chosen site's cluster scheduler runs once the request is placed.

    `command` runs under `/bin/sh` (or the interpreter of its own `#!` line) with the
    request's CPUs, memory and accelerators, for at most `duration_hours` (the scheduler's
    time limit). Without a command the job holds its allocation for `duration_hours` (on a
    simulator: simulated time). A failed job is run again, on the same site, until
    `max_attempts` attempts have been made; a site whose scheduler is unavailable or refuses
    the job counts an attempt too, and the request is placed elsewhere when another site fits.
    An attempt ended because its request was preempted does not count.
    """

    command: str | None = Field(
        default=None,
        min_length=1,
        max_length=100_000,
        description="Shell command or script; none: hold the allocation for duration_hours.",
    )
    name: str = Field(
        default="job",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="A short name, shown by the scheduler next to the request id.",
    )
    max_attempts: int = Field(
        default=3, strict=True, ge=1, le=10, description="Attempts before the request fails."
    )
    environment: dict[Name, Text] = Field(
        default_factory=dict,
        max_length=bounds.MAX_ENVIRONMENT,
        description="Environment variables of the job.",
    )

    @field_validator("command")
    @classmethod
    def _no_nul(cls, command: str | None) -> str | None:
        if command is not None and "\x00" in command:
            raise ValueError("must not contain NUL characters")
        return command

    @field_validator("environment")
    @classmethod
    def _shell_names(cls, environment: dict[str, str]) -> dict[str, str]:
        bad = sorted(name for name in environment if not _ENV_NAME.match(name))
        if bad:
            raise ValueError(f"names must be shell variable names: {bad}")
        return environment


MAX_WAIT_S: Final = bounds.MAX_DURATION_HOURS * 3600
"""The longest a request may wait to start (seconds): as long as it may hold its resources."""

Start = Literal["now", "queue"]
"""When a request starts: `now` or it is rejected, or `queue`: wait for the earliest start at
which it fits, within its max wait."""


def _new_request_id() -> str:
    return f"req-{uuid.uuid4().hex[:12]}"


class PlacementRequest(DomainModel):
    id: Name = Field(default_factory=_new_request_id, min_length=1)
    tenant: Name = "default"
    source_province: Name = Field(min_length=1)
    access_node: Name | None = Field(default=None, description="Defaults to the province's first.")
    resources: ResourceDemand
    constraints: Constraints = Field(default_factory=Constraints)
    duration_hours: float = Field(
        gt=0, le=bounds.MAX_DURATION_HOURS, strict=True, allow_inf_nan=False
    )
    priority: int = Field(default=0, strict=True, ge=0, le=9, description="0 lowest, 9 highest.")
    priority_class: Annotated[Name, Field(min_length=1)] | None = Field(
        default=None,
        description="An operator's priority class (GET /v1/priority-classes); none: the "
        "default class.",
    )
    max_wait_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_WAIT_S,
        strict=True,
        allow_inf_nan=False,
        description="How long it may wait to start (seconds); none: its class's default.",
    )
    start: Start = Field(
        default="now",
        description='"now": start now or be rejected. "queue": wait in the region\'s admission '
        "queue for the earliest start at which it fits, within max_wait_s.",
    )
    workload_class: WorkloadClass = WorkloadClass.BATCH
    objective: ObjectiveWeights = Field(default_factory=ObjectiveWeights)
    national_optimum: bool = Field(
        default=False, description="Search the whole country even when the source province fits."
    )
    job: JobPart | None = Field(
        default=None,
        description="Run this on the chosen site's scheduler; none: only reserve the capacity.",
    )
    flows: Flows | None = Field(
        default=None,
        description="What the job moves between sites and provinces (staging before or "
        "during its run, delivery of its results, serving traffic), each over the window it "
        'needs; a request with flows asks start "queue".',
    )

    @property
    def moves_data(self) -> bool:
        """Whether it states flows, which are planned over time by the admission queue."""
        return self.flows is not None and not self.flows.empty
