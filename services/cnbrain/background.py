"""Background tasks that live as long as an exit stack: a brain's loops (expiry, retries,
links to peers), cancelled and awaited when the brain stops."""

import asyncio
import contextlib
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from typing import Any


def background(stack: AsyncExitStack, work: Coroutine[Any, Any, None], name: str) -> None:
    """Run `work` until `stack` unwinds, then cancel it and wait for it to end."""
    stack.push_async_callback(stop_task, asyncio.create_task(work, name=f"cnbrain-{name}"))


async def stop_task(task: "asyncio.Task[Any]") -> None:
    """Cancel `task` and wait for it to end (its cancellation is not an error here)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
