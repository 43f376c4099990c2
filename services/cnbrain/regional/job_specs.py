"""The scheduler job of a placed request: what it runs and with which resources."""

import math

from cnbrain.domain.request import PlacementRequest
from cnbrain.execution import JobSpec
from cnbrain.ledger.claim import duration_seconds

GRACE_S = 60
"""Added to `duration_hours` for the scheduler's time limit: start-up, and schedulers that
count whole minutes, must not end a job that keeps to its duration."""


def job_spec(request: PlacementRequest, *, attempt: int) -> JobSpec:
    """The job of `request`'s attempt `attempt` (the request must have a `job` part).

    It gets the request's nodes, and on each node its CPUs (rounded up to whole cores, at
    least one), memory (MiB, rounded up) and accelerators (the model as the request names it;
    the site's backend maps it to its own GPU type; a fraction of one as `gpu_milli`); and
    `duration_hours` plus `GRACE_S` as its time limit. Without a command it holds its
    allocation for `duration_hours` (`sleep`); a simulator runs it for `duration_hours`
    either way (unless the command sleeps otherwise). The environment adds CNBRAIN_ATTEMPT.
    Raises ValueError when `request` has no job.
    """
    job = request.job
    if job is None:
        raise ValueError(f"request {request.id!r} has no job")
    duration_s = duration_seconds(request.duration_hours)
    accelerator = request.resources.accelerator
    return JobSpec(
        request_id=request.id,
        name=job.name,
        command=job.command if job.command is not None else f"sleep {duration_s}",
        nodes=request.resources.nodes,
        cpus=max(1, math.ceil(request.resources.cpu)),
        memory_mib=max(1, math.ceil(request.resources.memory_gib * 1024)),
        gpus=accelerator.count if accelerator is not None else 0,
        gpu_milli=accelerator.fraction_milli if accelerator is not None else None,
        gpu_type=accelerator.model if accelerator is not None else None,
        time_limit_s=duration_s + GRACE_S,
        environment={**job.environment, "CNBRAIN_ATTEMPT": str(attempt)},
        expected_runtime_s=float(duration_s),
    )
