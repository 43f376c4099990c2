"""A simulator's timestamps on the machine's clock.

A `SimulatedBackend` reports times on its own timeline, which runs `time_scale` times faster
than its clock. The brain stores times on the machine's clock, so that attempts and usage
records fall in the period in which they happened: a simulated moment `m` is
`now - (simulator's now - m) / time_scale`. Durations (a usage record's `elapsed_s` and its
hours) stay simulated. A real scheduler's times are left as they are.
"""

from datetime import UTC, datetime

from cnbrain.domain.backend_ref import BackendRef
from cnbrain.execution import Clock, ClusterBackend, JobAccounting, JobStatus
from cnbrain.execution.simulator import SimulatedBackend

_TIMES = ("submitted_at", "started_at", "ended_at")


class RealTime:
    """Maps simulators' times onto `clock` (the simulators' own clock)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def of(
        self, ref: BackendRef, backend: ClusterBackend, moment: datetime | None
    ) -> datetime | None:
        """`moment` as the backend reported it, on the machine's clock."""
        if moment is None or ref.kind != "simulator" or not isinstance(backend, SimulatedBackend):
            return moment
        lag = (backend.now() - moment.timestamp()) / ref.time_scale
        return datetime.fromtimestamp(self._clock.now() - lag, tz=UTC)

    def status(self, ref: BackendRef, backend: ClusterBackend, status: JobStatus) -> JobStatus:
        return status.model_copy(
            update={name: self.of(ref, backend, getattr(status, name)) for name in _TIMES}
        )

    def accounting(
        self, ref: BackendRef, backend: ClusterBackend, accounting: JobAccounting
    ) -> JobAccounting:
        return accounting.model_copy(
            update={name: self.of(ref, backend, getattr(accounting, name)) for name in _TIMES}
        )
