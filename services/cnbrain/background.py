"""Background tasks that live as long as an exit stack: a brain's loops (expiry, retries,
links to peers), cancelled and awaited when the brain stops."""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Coroutine
from contextlib import AsyncExitStack
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger("cnbrain")


def background(stack: AsyncExitStack, work: Coroutine[Any, Any, None], name: str) -> None:
    """Run `work` until `stack` unwinds, then cancel it and wait for it to end. Should it end
    before (a loop that raised, or was cancelled by something else), that is logged as an
    error: the brain runs on without it."""
    task = asyncio.create_task(work, name=f"cnbrain-{name}")
    task.add_done_callback(_ended_early)
    stack.push_async_callback(stop_task, task)


def _ended_early(task: "asyncio.Task[Any]") -> None:
    if task.cancelled():
        log.error("background task %s was cancelled; it no longer runs", task.get_name())
        return
    error = task.exception()
    log.error(
        "background task %s ended (%s); it no longer runs",
        task.get_name(),
        "without an error" if error is None else repr(error),
        exc_info=error,
    )


async def stop_task(task: "asyncio.Task[Any]") -> None:
    """Cancel `task` and wait for it to end (its cancellation is not an error here)."""
    task.remove_done_callback(_ended_early)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def finished(work: Awaitable[T]) -> T:
    """`work`, run to its end even when the caller is cancelled meanwhile; the cancellation
    takes effect once it has ended. For a short transaction a loop must not cut in the
    middle: a cut one is rolled back while its connection is torn down, and on SQLite the
    next one (a lease let go at the stop, say) could wait out the busy timeout behind it."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # its failure, if any, gives way to the cancellation
        raise
