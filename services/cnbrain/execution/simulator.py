"""`SimulatedBackend`: a simulator of a cluster scheduler, for sites without a real one.

Nothing runs: each job's life is computed from a clock. It is a `ClusterBackend` like the real
adapters, and says what it is: its job ids start with "sim-", every status message starts with
"simulated", and its accounting's `source` names the simulator.

A simulated job waits `queue_delay_s` pending, then runs for its run time, then ends:
- its run time is the sum of the `sleep N` commands of its `command` (lines, or parts joined by
  `;` or `&&`), else its `expected_runtime_s`, else its whole `time_limit_s`;
- it fails with code N at the end of its run when its command has `exit N` (N > 0; what follows
  `exit` is not read), else completes with code 0; a run time above the time limit ends in
  TIMEOUT at the limit. Other commands take no simulated time.
Suspending freezes its progress (its time limit does not count while suspended); cancelling
ends it at once. Time is simulated time: `time_scale` simulated seconds pass per second of
`clock` (a 1-hour job with time_scale=60 ends after a minute), counted from the backend's
creation; every timestamp it reports is on that simulated timeline.
"""

import itertools
import re
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass

from cnbrain.closing import Closing
from cnbrain.execution.clock import Clock, SystemClock
from cnbrain.execution.errors import BackendRejected, UnknownJob
from cnbrain.execution.jobs import JobAccounting, JobSpec, JobState, JobStatus, utc_from_epoch
from cnbrain.execution.watching import watch_by_polling

_SLEEP = re.compile(r"^sleep\s+(\d+(?:\.\d*)?|\.\d+)s?$")
_EXIT = re.compile(r"^exit(?:\s+(\d+))?$")
_PARTS = re.compile(r"\n|;|&&")


def simulated_run(job: JobSpec) -> tuple[float, int]:
    """(run time in seconds, exit code) of `job` in the simulator, from its command."""
    slept, exit_code, any_sleep = 0.0, 0, False
    for part in _PARTS.split(job.command):
        command = part.strip()
        if sleep := _SLEEP.match(command):
            slept += float(sleep.group(1))
            any_sleep = True
        elif exit_ := _EXIT.match(command):
            exit_code = int(exit_.group(1) or 0)
            break
    if any_sleep:
        return slept, exit_code
    if job.expected_runtime_s is not None:
        return job.expected_runtime_s, exit_code
    return float(job.time_limit_s), exit_code


@dataclass(slots=True)
class _Job:
    """One simulated job; `progress_s` is run time done, as of simulated time `last`."""

    job_id: str
    spec: JobSpec
    submitted: float
    start_at: float
    run_s: float
    code: int
    state: JobState = JobState.PENDING
    started: float | None = None
    ended: float | None = None
    progress_s: float = 0.0
    last: float = 0.0
    suspended_since: float | None = None
    suspended_s: float = 0.0
    exit_code: int | None = None


class SimulatedBackend(Closing):
    """A simulator of a cluster scheduler (a `ClusterBackend`): jobs "run" on a clock only.

    Keyword-only: `clock` (default the system's; a `ManualClock` in tests), `time_scale`
    simulated seconds per clock second, `queue_delay_s` simulated seconds each job stays
    pending, and the simulated cluster's limits: a job asking more than `max_cpus`,
    `max_memory_mib` or `max_gpus` on all its nodes together, or a GPU type not in
    `gpu_types` (when given), is rejected with `BackendRejected`. Jobs never wait for each
    other: capacity is the brain's business.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        time_scale: float = 1.0,
        queue_delay_s: float = 0.0,
        max_cpus: int | None = None,
        max_memory_mib: int | None = None,
        max_gpus: int | None = None,
        gpu_types: Collection[str] | None = None,
    ) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be positive, got {time_scale}")
        if queue_delay_s < 0:
            raise ValueError(f"queue_delay_s must not be negative, got {queue_delay_s}")
        self._clock = clock or SystemClock()
        self._scale = time_scale
        self._queue_delay_s = queue_delay_s
        self._max_cpus = max_cpus
        self._max_memory_mib = max_memory_mib
        self._max_gpus = max_gpus
        self._gpu_types = frozenset(gpu_types) if gpu_types is not None else None
        self._origin = self._clock.now()
        self._jobs: dict[str, _Job] = {}
        self._ids = itertools.count(1)

    async def aclose(self) -> None:
        return None

    def now(self) -> float:
        """Simulated time now, in POSIX seconds."""
        return self._origin + (self._clock.now() - self._origin) * self._scale

    # ------------------------------------------------------------------------------- contract

    async def submit(self, job: JobSpec) -> str:
        self._check_fits(job)
        now = self.now()
        run_s, code = simulated_run(job)
        job_id = f"sim-{next(self._ids)}"
        self._jobs[job_id] = _Job(
            job_id=job_id,
            spec=job,
            submitted=now,
            start_at=now + self._queue_delay_s,
            run_s=run_s,
            code=code,
            last=now,
        )
        return job_id

    async def status(self, job_id: str) -> JobStatus:
        job = self._advanced(job_id)
        exit_code = job.exit_code if job.state.is_final else None
        return JobStatus(
            job_id=job.job_id,
            request_id=job.spec.request_id,
            state=job.state,
            backend_state=f"SIMULATED_{job.state.name}",
            reason="simulated",
            exit_code=exit_code,
            submitted_at=utc_from_epoch(job.submitted),
            started_at=utc_from_epoch(job.started),
            ended_at=utc_from_epoch(job.ended),
            message=f"simulated job {job.job_id} {job.state.value}"
            + (f", exit code {exit_code}" if exit_code is not None else "")
            + " (a simulator: nothing ran)",
        )

    async def suspend(self, job_id: str) -> None:
        job = self._advanced(job_id)
        if job.state is JobState.SUSPENDED:
            return
        if job.state is not JobState.RUNNING:
            raise BackendRejected(
                f"simulated job {job_id} is {job.state.value}: only a running job can be suspended"
            )
        job.state = JobState.SUSPENDED
        job.suspended_since = job.last

    async def resume(self, job_id: str) -> None:
        job = self._advanced(job_id)
        if job.state is JobState.RUNNING:
            return
        if job.state is not JobState.SUSPENDED or job.suspended_since is None:
            raise BackendRejected(
                f"simulated job {job_id} is {job.state.value}: only a suspended job can be resumed"
            )
        job.suspended_s += job.last - job.suspended_since
        job.suspended_since = None
        job.state = JobState.RUNNING

    async def cancel(self, job_id: str) -> None:
        job = self._advanced(job_id)
        if job.state.is_final:
            return
        if job.suspended_since is not None:
            job.suspended_s += job.last - job.suspended_since
            job.suspended_since = None
        self._end(job, job.last, JobState.CANCELLED, None)

    async def accounting(self, job_id: str) -> JobAccounting | None:
        if job_id not in self._jobs:
            return None
        job = self._advanced(job_id)
        ran = job.started is not None
        spec = job.spec
        suspended_s = job.suspended_s
        if job.suspended_since is not None:
            suspended_s += job.last - job.suspended_since
        elapsed_s = ((job.ended or job.last) - job.started) if job.started is not None else 0.0
        n = spec.nodes
        tres = {"cpu": n * spec.cpus, "mem": n * spec.memory_mib, "node": n} if ran else {}
        if ran and spec.gpus:
            tres["gres/gpu"] = n * spec.gpus
        return JobAccounting(
            job_id=job.job_id,
            request_id=spec.request_id,
            state=job.state,
            backend_state=f"SIMULATED_{job.state.name}",
            submitted_at=utc_from_epoch(job.submitted),
            started_at=utc_from_epoch(job.started),
            ended_at=utc_from_epoch(job.ended),
            elapsed_s=elapsed_s,
            suspended_s=suspended_s,
            nodes=tres.get("node", 0),
            cpus=tres.get("cpu", 0),
            memory_mib=tres.get("mem", 0),
            gpus=tres.get("gres/gpu", 0),
            tres=tres,
            cpu_time_s=job.progress_s * n * spec.cpus,
            exit_code=job.exit_code if job.state.is_final else None,
            source="cnbrain simulator (simulated accounting: nothing ran)",
        )

    async def watch(
        self, job_ids: Sequence[str], interval_s: float = 1.0
    ) -> AsyncIterator[JobStatus]:
        async for status in watch_by_polling(
            self.status, job_ids, interval_s, sleep=self._clock.sleep
        ):
            yield status

    # ----------------------------------------------------------------------------- simulation

    def _check_fits(self, job: JobSpec) -> None:
        limits = (
            ("CPUs", job.nodes * job.cpus, self._max_cpus),
            ("MiB of memory", job.nodes * job.memory_mib, self._max_memory_mib),
            ("GPUs", job.nodes * job.gpus, self._max_gpus),
        )
        for what, asked, limit in limits:
            if limit is not None and asked > limit:
                raise BackendRejected(
                    f"simulated scheduler refused the job of {job.request_id}: it asks {asked} "
                    f"{what}, the simulated cluster has {limit}"
                )
        known = self._gpu_types
        if job.gpu_type is not None and known is not None and job.gpu_type not in known:
            raise BackendRejected(
                f"simulated scheduler refused the job of {job.request_id}: no GPU type "
                f"{job.gpu_type!r} (it has {sorted(known)})"
            )

    def _advanced(self, job_id: str) -> _Job:
        """The job, its life computed up to now."""
        job = self._jobs.get(job_id)
        if job is None:
            raise UnknownJob(job_id, "the simulator never took it")
        now = self.now()
        if job.state is JobState.PENDING and now >= job.start_at:
            job.state, job.started, job.last = JobState.RUNNING, job.start_at, job.start_at
        if job.state is JobState.RUNNING:
            limit = float(job.spec.time_limit_s)
            target = min(job.run_s, limit)
            if job.last + (target - job.progress_s) <= now:
                end = job.last + (target - job.progress_s)
                job.progress_s = target
                if job.run_s > limit:
                    self._end(job, end, JobState.TIMEOUT, None)
                elif job.code:
                    self._end(job, end, JobState.FAILED, job.code)
                else:
                    self._end(job, end, JobState.COMPLETED, 0)
                return job
            job.progress_s += now - job.last
        if not job.state.is_final:
            job.last = now
        return job

    @staticmethod
    def _end(job: _Job, at: float, state: JobState, exit_code: int | None) -> None:
        job.state, job.ended, job.last, job.exit_code = state, at, at, exit_code
