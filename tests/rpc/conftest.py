"""Fixtures of the gRPC plumbing tests (see rpc_ledger.py)."""

from collections.abc import AsyncIterator

import pytest_asyncio

from tests.rpc.rpc_ledger import Rpc


@pytest_asyncio.fixture
async def rpc() -> AsyncIterator[Rpc]:
    state = Rpc()
    try:
        yield state
    finally:
        for channel in state.channels:
            await channel.close()
        for server in state.servers:
            await server.stop(0)
