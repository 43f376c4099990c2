"""What a simulation run records: each job's fate, samples over time, and the run itself."""

from dataclasses import dataclass
from enum import StrEnum

from cnbrain.netmap.arrays import FloatArray


class JobStatus(StrEnum):
    ACCEPTED = "accepted"
    """Placed (at arrival or after waiting); possibly still running when the run stopped."""
    REJECTED = "rejected"
    WAITING = "waiting"
    """Still in the queue when the run stopped at its horizon."""


class RejectReason(StrEnum):
    NEVER_FITS = "never_fits"
    """No site could ever take the job: its unresolvable constraints leave no site, or it is
    larger than the total capacity of every site they leave. Rejected at arrival."""
    QUEUE_TIMEOUT = "queue_timeout"
    """It could fit on an empty map but got no capacity within its queue limit (after a
    preemption, counted from the preemption)."""


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One job's fate. Times are on the simulated clock (the trace's, divided by the load)."""

    job_id: str
    tenant: str
    status: JobStatus
    arrival_s: float
    start_s: float | None = None
    end_s: float | None = None
    """Departure time: start + duration (may lie after the horizon)."""
    reason: RejectReason | None = None
    detail: str | None = None
    """For a rejected job, the engine's last reason (or the eligibility check's)."""
    site: str | None = None
    cost_cny: float = 0.0
    energy_kwh: float = 0.0
    carbon_kg: float = 0.0
    latency_ms: float | None = None
    max_latency_ms: float | None = None
    accelerators: float = 0.0
    priority_class: str | None = None
    """Its class (`cnbrain.simulate.classes`), None when the run has no classes."""
    preemptions: int = 0
    """How many times it was preempted (each time back to the queue, its work lost)."""
    preempted_run_s: float = 0.0
    """Seconds it ran before its preemptions: work lost, done again."""

    @property
    def wait_s(self) -> float | None:
        """Queueing delay of an accepted job: the time it spent in the queue, that is its
        (last) start minus its arrival, less the time it ran before being preempted."""
        if self.start_s is None:
            return None
        return self.start_s - self.arrival_s - self.preempted_run_s

    @property
    def lost_accelerator_hours(self) -> float:
        """Accelerator-hours it ran before its preemptions."""
        return self.accelerators * self.preempted_run_s / 3600


@dataclass(frozen=True, slots=True, eq=False)
class Sample:
    """The state at one sampling instant (after every event at that instant)."""

    time_s: float
    site_utilisation: FloatArray
    """Per site: the highest share of CPU, memory, storage or accelerators in use."""
    link_utilisation: FloatArray
    """Per link: reserved bandwidth / capacity."""
    accelerators_used: float
    accelerators_free: float
    stranded_accelerators: float
    """See `cnbrain.simulate.metrics.stranded_accelerators`. In accelerators: a fraction
    of one counts its share."""
    accepted: int
    rejected: int
    waiting: int
    running: int


@dataclass(frozen=True, slots=True, eq=False)
class SimulationResult:
    """One run of one policy at one offered load.

    Conservation: `jobs` has one outcome per input job, in input order; with `finished`
    (no horizon cut the run short) no job is waiting and the ledger held no reservation at
    the end.
    """

    policy: str
    load: float
    seed: int
    jobs: tuple[JobOutcome, ...]
    samples: tuple[Sample, ...]
    site_ids: tuple[str, ...]
    link_ids: tuple[str, ...]
    end_s: float
    """Where the clock stopped: the horizon when it cut the run short, else the time of the
    last arrival, departure or rejection."""
    finished: bool
    reservations_held_at_end: int
    engine_calls: int
    """Placement cycles the engine ran (arrival batches and retries)."""
    wall_s: float
    admission: str = "retry"
    """The order of the retry rounds (`cnbrain.simulate.admission`)."""
    preemption_modelled: bool = False
    """Whether the run could preempt: priority classes with `backfill` admission."""

    def count(self, status: JobStatus) -> int:
        return sum(1 for j in self.jobs if j.status is status)
