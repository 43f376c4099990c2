"""Group commit: concurrent callers hand their items to one worker, which processes whatever
is waiting as one batch.

`GroupCommit(process, cap=...)`: `await group.submit(item)` queues `item` and returns its own
result once the batch that holds it has been processed. A worker task runs while items wait:
it yields to the event loop once (so that callers ready to submit in the same turn join the
batch), takes up to `cap` waiting items in arrival order, awaits `process(items)`, and hands
each caller the result (or exception) at its position. It never waits on purpose for a batch
to fill: one item alone is processed at once. When the queue is empty the worker ends; the next
`submit` starts another. Batches are processed one at a time, in arrival order.

Contract of `process`: it gets a non-empty list and returns one entry per item, in order: the
item's result, the exception to raise in its caller, or `Again(item)`: process `item` (the
same or a successor) once more, at the head of the next batch, for the same caller. If
`process` itself raises, every caller of the batch gets that exception.

A caller that stops waiting (its task is cancelled) does not stop the processing of its item:
the batch goes on for the other callers and the item's result is dropped. If the worker itself
is cancelled, the callers of its batch and of every waiting item get `BatchAbortedError`.
"""

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

log = logging.getLogger("cnbrain.group_commit")

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_CAP = 64
"""Items processed together at most."""


@dataclass(frozen=True, slots=True)
class Again(Generic[T]):
    """A result of `process` that puts `item` at the head of the next batch."""

    item: T


class BatchAbortedError(RuntimeError):
    """The worker stopped (its task was cancelled, say at shutdown) before the item's batch
    was processed to the end."""


class GroupCommit(Generic[T, R]):
    def __init__(
        self,
        process: Callable[[list[T]], Awaitable[Sequence[R | BaseException | Again[T]]]],
        *,
        cap: int = DEFAULT_CAP,
    ) -> None:
        if cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap}")
        self._process = process
        self._cap = cap
        self._waiting: deque[tuple[T, asyncio.Future[R]]] = deque()
        self._worker: asyncio.Task[None] | None = None
        self.batches = 0
        """Batches processed so far."""
        self.items = 0
        """Items processed so far (`items / batches` is the mean batch size)."""

    @property
    def waiting(self) -> int:
        """Items queued and not yet taken into a batch."""
        return len(self._waiting)

    async def submit(self, item: T) -> R:
        """Queue `item`; its result once its batch is processed (or the exception for it)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._waiting.append((item, future))
        worker = self._worker
        if worker is None or worker.done() or worker.get_loop() is not loop:
            self._worker = loop.create_task(self._run())
        return await future

    async def _run(self) -> None:
        batch: list[tuple[T, asyncio.Future[R]]] = []
        try:
            while self._waiting:
                await asyncio.sleep(0)
                batch = [self._waiting.popleft() for _ in range(min(self._cap, self.waiting))]
                await self._settle(batch)
                batch = []
        except asyncio.CancelledError:
            aborted = BatchAbortedError("the brain stopped before the request was settled")
            for _, future in (*batch, *self._waiting):
                _fail(future, aborted)
            self._waiting.clear()
            raise

    async def _settle(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        items = [item for item, _ in batch]
        try:
            results = await self._process(items)
            if len(results) != len(items):
                raise RuntimeError(f"{len(results)} results for a batch of {len(items)}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("a batch of %d failed", len(items))
            results = [exc for _ in items]
        self.batches += 1
        self.items += len(items)
        again: list[tuple[T, asyncio.Future[R]]] = []
        for (_, future), result in zip(batch, results, strict=True):
            if isinstance(result, Again):
                again.append((result.item, future))
            elif future.done():  # the caller stopped waiting
                continue
            elif isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
        self._waiting.extendleft(reversed(again))


def _fail(future: "asyncio.Future[R]", exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
