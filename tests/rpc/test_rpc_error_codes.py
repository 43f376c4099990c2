"""The gRPC edge of the error tree: a handler's error of the tree ends the call with the
status code of its kind and the error's message; any other exception stays UNKNOWN."""

import logging

import grpc
import pytest

from cnbrain.domain.errors import CnbrainError, Exhausted, Forbidden
from cnbrain.execution.errors import UnknownJob
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.ledger.memory import LedgerError
from cnbrain.placement.errors import PlacementError, RequestError
from tests.polling import wait_until
from tests.rpc.rpc_ledger import RecordingLedger, Rpc, prepare_of

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (RequestError("cpu", "must be finite"), grpc.StatusCode.INVALID_ARGUMENT),
        (UnknownJob("42"), grpc.StatusCode.NOT_FOUND),
        (Forbidden("only the national brain may"), grpc.StatusCode.PERMISSION_DENIED),
        (LedgerError("site 'a' cpu: not enough room"), grpc.StatusCode.FAILED_PRECONDITION),
        (Exhausted("rate spent", retry_after_s=1.0), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (PeerUnavailable("the national brain", "unavailable"), grpc.StatusCode.UNAVAILABLE),
        (PlacementError("solve", RuntimeError("boom")), grpc.StatusCode.INTERNAL),
    ],
)
async def test_an_error_of_the_tree_ends_the_call_with_the_code_of_its_kind(
    rpc: Rpc, error: CnbrainError, code: grpc.StatusCode
) -> None:
    server, _ = await rpc.serve(RecordingLedger(raises=error))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await rpc.ledger(server).Prepare(prepare_of("r1"), timeout=2)
    assert raised.value.code() is code
    assert raised.value.details() == str(error)


async def test_any_other_exception_stays_unknown(rpc: Rpc) -> None:
    server, _ = await rpc.serve(RecordingLedger(raises=KeyError("r1")))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await rpc.ledger(server).Prepare(prepare_of("r1"), timeout=2)
    assert raised.value.code() is grpc.StatusCode.UNKNOWN


async def test_the_call_is_logged_with_the_code_of_the_kind(
    rpc: Rpc, caplog: pytest.LogCaptureFixture
) -> None:
    server, _ = await rpc.serve(RecordingLedger(raises=UnknownJob("7")))
    with caplog.at_level(logging.INFO, logger="cnbrain.rpc"):
        with pytest.raises(grpc.aio.AioRpcError):
            await rpc.ledger(server).Prepare(prepare_of("r1"), timeout=2)
        # the server writes its line once the call has ended, which may be after the client
        # has its answer
        await wait_until(
            lambda: any("code=NOT_FOUND" in record.getMessage() for record in caplog.records),
            5.0,
        )
