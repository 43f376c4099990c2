"""What a backend is given (`JobSpec`) and what it tells back (`JobStatus`, `JobAccounting`)."""

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Final, Self

from pydantic import AwareDatetime, Field, field_validator, model_validator

from cnbrain.domain.accelerators import MILLI
from cnbrain.domain.model import DomainModel

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class JobState(StrEnum):
    """The closed set of job states every backend reports.

    PENDING and RUNNING and SUSPENDED are live; the others are final (`is_final`). A scheduler's
    finer states map onto these; `JobStatus.backend_state` keeps the scheduler's own word.
    """

    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"

    @property
    def is_final(self) -> bool:
        """True when the job will never change state again."""
        return self not in _LIVE


_LIVE = frozenset({JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED})


class JobSpec(DomainModel):
    """One job to run on a site's scheduler, on behalf of one placement request.

    The job runs `command` with `/bin/sh` (or with the interpreter of its own `#!` line) in
    `working_directory`, as the scheduler account the backend authenticates as. It gets
    `nodes` nodes at once (all or none), with one task on each: `cpus` cores, `memory_mib` MiB
    and `gpus` GPUs (of `gpu_type`, the accelerator model as the site names it, when given) on
    every node, or with `gpu_milli` (1 to 999, `gpus` 1, one node) that many thousandths of
    one GPU, which other jobs may share; the command runs on the first node (a multi-node
    job starts its work on every node itself, with the scheduler's launcher). It is stopped
    by the scheduler after `time_limit_s` seconds (a scheduler that counts in minutes rounds
    up). `environment` is its whole environment besides what the backend adds (PATH when not
    given, CNBRAIN_REQUEST_ID).
    `output_path` receives its standard output and error; None leaves that to the backend.
    `expected_runtime_s` is the submitter's estimate: schedulers ignore it, the simulator runs
    the job this long unless its command says otherwise (see `cnbrain.execution.simulator`).
    """

    request_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
    name: str = Field(default="job", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    command: str = Field(min_length=1)
    nodes: int = Field(default=1, strict=True, ge=1)
    cpus: int = Field(default=1, strict=True, ge=1)
    memory_mib: int = Field(default=512, strict=True, ge=1)
    gpus: int = Field(default=0, strict=True, ge=0)
    gpu_milli: int | None = Field(default=None, strict=True, ge=1, lt=MILLI)
    gpu_type: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    time_limit_s: int = Field(strict=True, ge=1)
    environment: dict[str, str] = Field(default_factory=dict)
    working_directory: str = Field(default="/tmp", pattern=r"^/")
    output_path: str | None = Field(default=None, pattern=r"^/")
    expected_runtime_s: float | None = Field(default=None, ge=0)

    @field_validator("environment")
    @classmethod
    def _names_are_shell_names(cls, environment: dict[str, str]) -> dict[str, str]:
        bad = sorted(name for name in environment if not _ENV_NAME.match(name))
        if bad:
            raise ValueError(f"environment names must be shell variable names: {bad}")
        return environment

    @model_validator(mode="after")
    def _gpu_type_needs_gpus(self) -> Self:
        if self.gpu_type is not None and self.gpus == 0:
            raise ValueError("gpu_type is given but gpus is 0")
        if self.gpu_milli is not None and (self.gpus != 1 or self.nodes != 1):
            raise ValueError("a fraction of a GPU is of one GPU on one node")
        return self


class JobStatus(DomainModel):
    """A job's state as its backend reports it now.

    `exit_code` is the job's exit status once it exited by itself (None before, or when it was
    killed by a signal: then `signal` is set). Times are UTC; `ended_at` is set only in a final
    state. `reason` is the scheduler's reason for the state ("" when it gives none), `message`
    one line for people that names the backend (a simulator's always says it is simulated).
    """

    job_id: str
    request_id: str | None
    state: JobState
    backend_state: str
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    submitted_at: AwareDatetime | None = None
    started_at: AwareDatetime | None = None
    ended_at: AwareDatetime | None = None
    message: str


class JobAccounting(DomainModel):
    """A job's record in its backend's own accounting.

    `elapsed_s` is the run time as that accounting counts it, `suspended_s` the part it counts
    as suspended; `nodes`, `cpus`, `memory_mib` and `gpus` are what was allocated (on all
    nodes together), `tres` every
    allocated trackable resource by the scheduler's own names (Slurm: cpu, mem in MiB, node,
    billing, gres/gpu, ...), `cpu_time_s` the CPU time the job's processes used. `ended_at` and
    `exit_code` are None while the job runs, and `exit_code` also when the accounting cannot
    tell it (see docs/execution.md). `source` names the accounting.
    """

    job_id: str
    request_id: str | None
    state: JobState
    backend_state: str
    submitted_at: AwareDatetime | None
    started_at: AwareDatetime | None
    ended_at: AwareDatetime | None
    elapsed_s: float = Field(ge=0)
    suspended_s: float = Field(default=0.0, ge=0)
    nodes: int = Field(default=1, ge=0)
    cpus: int = Field(ge=0)
    memory_mib: int = Field(ge=0)
    gpus: int = Field(default=0, ge=0)
    tres: dict[str, int] = Field(default_factory=dict)
    cpu_time_s: float = Field(default=0.0, ge=0)
    exit_code: int | None = None
    signal: int | None = None
    source: str


RUNNING_STATES: Final = frozenset({"idle", "mixed", "allocated", "completing"})
"""A node's states (Slurm's words, any case) in which it may take a new job."""

OUT_OF_SERVICE_FLAGS: Final = frozenset(
    {
        "DRAIN",
        "FAIL",
        "MAINT",
        "NOT_RESPONDING",
        "POWER_DOWN",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "RESERVED",
    }
)
"""A node's state flags (Slurm's words, any case) any one of which keeps new jobs off it."""


class NodeReport(DomainModel):
    """One node as its cluster scheduler reports it: `state` and `state_flags` in the
    scheduler's words, its CPUs and memory (MiB) with what jobs hold of them, and its GPUs
    by the scheduler's GPU type name ("" when untyped) with how many jobs hold whole and how
    many others jobs share (`gpus_shared`: shards in use on them); `shards_used`, when the
    site cuts its GPUs into shards, the shards jobs hold of each GPU that shards are in use
    on, by the GPU's index on the node."""

    name: str
    state: str
    state_flags: tuple[str, ...] = ()
    cpus: int = Field(ge=0)
    cpus_allocated: int = Field(ge=0)
    memory_mib: int = Field(ge=0)
    memory_allocated_mib: int = Field(ge=0)
    gpus: dict[str, int] = Field(default_factory=dict)
    gpus_used: dict[str, int] = Field(default_factory=dict)
    gpus_shared: dict[str, int] = Field(default_factory=dict)
    shards_used: dict[int, int] = Field(default_factory=dict)

    @property
    def free_gpus(self) -> dict[str, int]:
        """GPUs no job holds, whole or in part, by type."""
        return {
            t: max(0, n - self.gpus_used.get(t, 0) - self.gpus_shared.get(t, 0))
            for t, n in self.gpus.items()
        }

    @property
    def takes_jobs(self) -> bool:
        """Whether the node may take a new job: it is up (`RUNNING_STATES`) with no flag of
        `OUT_OF_SERVICE_FLAGS` (drained, failed, in maintenance, powered down, ...)."""
        return self.state.lower() in RUNNING_STATES and not any(
            flag.upper() in OUT_OF_SERVICE_FLAGS for flag in self.state_flags
        )


def utc_from_epoch(seconds: float | None) -> datetime | None:
    """A POSIX time as an aware UTC datetime; None for None and for 0 (schedulers' "unset")."""
    if not seconds:
        return None
    return datetime.fromtimestamp(seconds, tz=UTC)
