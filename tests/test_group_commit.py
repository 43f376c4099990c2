"""The group commit on its own: who waits together is processed together, each caller gets
its own result, `Again` puts an item at the head of the next batch, a caller that stops
waiting does not stop the batch, and a stopped worker fails everyone still waiting."""

import asyncio

import pytest

from cnbrain.group_commit import Again, BatchAbortedError, GroupCommit

pytestmark = pytest.mark.asyncio


class Recorder:
    """A `process` that records its batches and answers each item with its double; an item
    that is an exception is answered with it, and odd negative items come back `Again` once
    as their positive value."""

    def __init__(self) -> None:
        self.batches: list[list[object]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, items: list[object]) -> list[object]:
        self.batches.append(list(items))
        await self.gate.wait()
        results: list[object] = []
        for item in items:
            if isinstance(item, BaseException):
                results.append(item)
            elif isinstance(item, int) and item < 0:
                results.append(Again(-item))
            else:
                assert isinstance(item, int)
                results.append(item * 2)
        return results


async def test_callers_waiting_together_are_processed_together() -> None:
    recorder = Recorder()
    group: GroupCommit[object, object] = GroupCommit(recorder)
    results = await asyncio.gather(*(group.submit(i) for i in range(10)))
    assert results == [i * 2 for i in range(10)]
    assert recorder.batches == [list(range(10))]
    assert (group.batches, group.items) == (1, 10)
    assert await group.submit(7) == 14  # alone: processed at once, without waiting for more
    assert recorder.batches[-1] == [7]


async def test_batches_hold_at_most_cap_items_in_arrival_order() -> None:
    recorder = Recorder()
    group: GroupCommit[object, object] = GroupCommit(recorder, cap=4)
    results = await asyncio.gather(*(group.submit(i) for i in range(10)))
    assert results == [i * 2 for i in range(10)]
    assert recorder.batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    with pytest.raises(ValueError, match="cap"):
        GroupCommit(recorder, cap=0)


async def test_arrivals_during_a_batch_make_the_next_one() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    group: GroupCommit[object, object] = GroupCommit(recorder)
    first = asyncio.ensure_future(group.submit(1))
    while not recorder.batches:
        await asyncio.sleep(0)
    later = [asyncio.ensure_future(group.submit(i)) for i in (2, 3, 4)]
    await asyncio.sleep(0.01)
    assert group.waiting == 3 and recorder.batches == [[1]]
    recorder.gate.set()
    assert await first == 2 and [await f for f in later] == [4, 6, 8]
    assert recorder.batches == [[1], [2, 3, 4]]


async def test_each_caller_gets_its_own_exception() -> None:
    recorder = Recorder()
    group: GroupCommit[object, object] = GroupCommit(recorder)
    bad = KeyError("mine")
    results = await asyncio.gather(
        group.submit(1), group.submit(bad), group.submit(3), return_exceptions=True
    )
    assert list(results) == [2, bad, 6]


async def test_a_failing_process_fails_only_its_batch() -> None:
    calls: list[list[int]] = []

    async def process(items: list[int]) -> list[int]:
        calls.append(items)
        if len(calls) == 1:
            raise RuntimeError("the database went away")
        return items

    group: GroupCommit[int, int] = GroupCommit(process)
    results = await asyncio.gather(group.submit(1), group.submit(2), return_exceptions=True)
    assert [type(r) for r in results] == [RuntimeError, RuntimeError]
    assert await group.submit(3) == 3


async def test_again_puts_the_item_at_the_head_of_the_next_batch() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    group: GroupCommit[object, object] = GroupCommit(recorder)
    first = [asyncio.ensure_future(group.submit(i)) for i in (1, -5, 2)]
    while not recorder.batches:
        await asyncio.sleep(0)
    later = asyncio.ensure_future(group.submit(9))
    await asyncio.sleep(0.01)
    recorder.gate.set()
    assert [await f for f in first] == [2, 10, 4]  # -5 came back once as 5, for its caller
    assert await later == 18
    assert recorder.batches == [[1, -5, 2], [5, 9]]


async def test_a_caller_that_stops_waiting_does_not_stop_the_batch() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    group: GroupCommit[object, object] = GroupCommit(recorder)
    impatient = asyncio.ensure_future(group.submit(-1))
    patient = asyncio.ensure_future(group.submit(2))
    while not recorder.batches:
        await asyncio.sleep(0)
    impatient.cancel()
    recorder.gate.set()
    assert await patient == 4
    while group.items < 3:  # the item of the caller that left is still processed to the end
        await asyncio.sleep(0.01)
    assert recorder.batches == [[-1, 2], [1]]


async def test_a_stopped_worker_fails_its_batch_and_everyone_waiting() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    group: GroupCommit[object, object] = GroupCommit(recorder)
    in_batch = asyncio.ensure_future(group.submit(1))
    while not recorder.batches:
        await asyncio.sleep(0)
    queued = asyncio.ensure_future(group.submit(2))
    await asyncio.sleep(0)
    assert group._worker is not None
    group._worker.cancel()
    for call in (in_batch, queued):
        with pytest.raises(BatchAbortedError):
            await call
    assert group.waiting == 0
    recorder.gate.set()
    assert await group.submit(3) == 6  # the next caller starts a new worker
