"""The adapter interface between a regional brain and the cluster scheduler of one site.

A brain never runs workloads itself: it hands each placed job to its site's `ClusterBackend`
and follows it there. Implementations: `SlurmBackend` (slurmrestd) and `SimulatedBackend` (for
sites without a real scheduler, clearly named as a simulator). `backend_for(BackendRef)` in
`cnbrain.execution.config` builds the one a site names.

Every method is a coroutine that does one round of work and returns; none blocks the event
loop. Errors: `BackendUnavailable` when the scheduler cannot be used now (retry later),
`BackendRejected` when it answered and refused, `UnknownJob` for an id it does not know.
"""

from collections.abc import AsyncIterator, Sequence
from typing import Protocol, runtime_checkable

from cnbrain.execution.jobs import JobAccounting, JobSpec, JobStatus


@runtime_checkable
class ClusterBackend(Protocol):
    """One site's scheduler, as the brain uses it. Job ids are the scheduler's own, as text."""

    async def submit(self, job: JobSpec) -> str:
        """Queue `job`; return the scheduler's id of it.

        Raises `BackendRejected` with the scheduler's reason when it will not take the job
        (resources it does not have, an unknown GPU type, a malformed command).
        """
        ...

    async def status(self, job_id: str) -> JobStatus:
        """The job's state now; for a finished job, its final state for as long as the
        scheduler (or its accounting) remembers it. Raises `UnknownJob` otherwise."""
        ...

    async def suspend(self, job_id: str) -> None:
        """Pause a running job: its processes stop, its resources stay allocated to it.

        Returns once the scheduler reports the job suspended (Slurm: within a few seconds).
        A no-op for a job already suspended; `BackendRejected` for a job in any other state
        (a pending job cannot be suspended: cancel it, or leave it queued).
        """
        ...

    async def resume(self, job_id: str) -> None:
        """Let a suspended job run on; returns once the scheduler reports it running.

        A no-op for a running job; `BackendRejected` otherwise.
        """
        ...

    async def cancel(self, job_id: str) -> None:
        """End the job, pending or running or suspended (its state becomes cancelled).

        A no-op for a job already in a final state.
        """
        ...

    async def accounting(self, job_id: str) -> JobAccounting | None:
        """The job's record in the scheduler's own accounting, or None while it has none yet.

        Accounting lags the scheduler: a job just submitted, started or ended may show there
        a moment later (with Slurm, seconds). The record of a live job has no `ended_at`.
        """
        ...

    def watch(self, job_ids: Sequence[str], interval_s: float = 1.0) -> AsyncIterator[JobStatus]:
        """Follow jobs: yield each job's status when first seen, then each time its state
        changes, polling every `interval_s` seconds; stop once every job is in a final state.

        An error of the backend ends the iteration by raising it (the caller may watch again).
        Closing the iterator early (`break`, `aclose()`) stops the polling.
        """
        ...

    async def aclose(self) -> None:
        """Release the backend's connections. Idempotent; the backend is unusable afterwards."""
        ...
