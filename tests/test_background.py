"""A brain's background task that ends before its brain stops is logged as an error; one
stopped with its brain is not."""

import asyncio
import logging
from contextlib import AsyncExitStack

import pytest

from cnbrain.background import background

pytestmark = pytest.mark.asyncio


async def test_a_background_task_that_ends_early_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails() -> None:
        raise RuntimeError("database down")

    async def cancelled() -> None:
        raise asyncio.CancelledError

    async def loops() -> None:
        await asyncio.Event().wait()

    caplog.set_level(logging.ERROR, logger="cnbrain")
    with pytest.raises(RuntimeError):
        async with AsyncExitStack() as stack:
            background(stack, fails(), "fails")
            background(stack, cancelled(), "cancelled")
            background(stack, loops(), "loops")
            await asyncio.sleep(0.05)
    messages = [record.getMessage() for record in caplog.records]
    assert any("cnbrain-fails ended (RuntimeError('database down'))" in m for m in messages), (
        messages
    )
    assert any("cnbrain-cancelled was cancelled" in m for m in messages), messages
    assert not any("cnbrain-loops" in m for m in messages), messages
