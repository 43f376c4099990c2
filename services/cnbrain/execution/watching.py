"""`ClusterBackend.watch` by polling a backend's `status`, shared by the backends."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from cnbrain.execution.jobs import JobState, JobStatus

StatusOf = Callable[[str], Awaitable[JobStatus]]
Sleep = Callable[[float], Awaitable[None]]


async def watch_by_polling(
    status: StatusOf,
    job_ids: Sequence[str],
    interval_s: float,
    *,
    sleep: Sleep = asyncio.sleep,
) -> AsyncIterator[JobStatus]:
    """Yield each job's first status, then each change of its state, until all are final.

    Every round asks `status` for each job not yet final, concurrently, then waits
    `interval_s` with `sleep`. Jobs are reported in the order of `job_ids` within a round; a
    job id given twice is followed once. An exception of `status` propagates.
    Raises `ValueError` if `interval_s` is not positive.
    """
    if interval_s <= 0:
        raise ValueError(f"interval_s must be positive, got {interval_s}")
    pending = list(dict.fromkeys(job_ids))
    last: dict[str, JobState] = {}
    while pending:
        statuses = await asyncio.gather(*(status(job_id) for job_id in pending))
        for current in statuses:
            if last.get(current.job_id) is not current.state:
                last[current.job_id] = current.state
                yield current
        pending = [s.job_id for s in statuses if not s.state.is_final]
        if pending:
            await sleep(interval_s)
