"""Request ids: sent by the client interceptors, set by the server interceptor for the
handler, carried by the calls a handler makes, and logged with each call."""

import logging

import grpc
import pytest

from cnbrain.rpc import current_request_id, request_id_scope
from cnbrain.rpc.context import is_valid_request_id
from cnbrain.v1 import ledger_pb2
from tests.rpc.rpc_ledger import RecordingLedger, Rpc, commit_of, prepare_of

pytestmark = pytest.mark.asyncio


async def test_the_handler_sees_the_request_id_of_the_calling_context(rpc: Rpc) -> None:
    server, ledger = await rpc.serve()
    stub = rpc.ledger(server)
    with request_id_scope("req-42"):
        await stub.Prepare(prepare_of("r1"), timeout=2)
    assert ledger.request_ids == ["req-42"]
    assert ledger.metadata[0]["x-request-id"] == "req-42"
    assert current_request_id() is None


async def test_a_call_outside_any_request_gets_a_new_id_per_call(rpc: Rpc) -> None:
    server, ledger = await rpc.serve()
    stub = rpc.ledger(server)
    await stub.Prepare(prepare_of("r1"), timeout=2)
    await stub.Prepare(prepare_of("r2"), timeout=2)
    first, second = ledger.request_ids
    assert first is not None and second is not None
    assert is_valid_request_id(first) and is_valid_request_id(second)
    assert first != second


async def test_an_id_in_the_callers_metadata_wins(rpc: Rpc) -> None:
    server, ledger = await rpc.serve()
    stub = rpc.ledger(server)
    with request_id_scope("from-context"):
        await stub.Prepare(
            prepare_of("r1"),
            timeout=2,
            metadata=(("x-request-id", "explicit"),),
        )
    assert ledger.request_ids == ["explicit"]


async def test_an_invalid_incoming_id_is_replaced(rpc: Rpc) -> None:
    server, ledger = await rpc.serve()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        prepare = channel.unary_unary(
            "/cnbrain.v1.LedgerService/Prepare",
            request_serializer=ledger_pb2.PrepareRequest.SerializeToString,
            response_deserializer=ledger_pb2.PrepareResponse.FromString,
        )
        await prepare(
            prepare_of("r1"),
            timeout=2,
            metadata=(("x-request-id", "x" * 500),),
        )
    finally:
        await channel.close()
    (seen,) = ledger.request_ids
    assert seen is not None and is_valid_request_id(seen) and seen != "x" * 500


async def test_the_id_follows_a_request_from_brain_to_brain(rpc: Rpc) -> None:
    downstream, last = await rpc.serve()
    upstream, first = await rpc.serve(RecordingLedger(forward_to=rpc.ledger(downstream)))
    with request_id_scope("cross-1"):
        await rpc.ledger(upstream).Prepare(prepare_of("r1"), timeout=2)
    assert first.request_ids == ["cross-1"]
    assert last.request_ids == ["cross-1"]
    assert "r1" in last.prepared


async def test_every_call_is_logged_with_its_request_id_and_code(
    rpc: Rpc, caplog: pytest.LogCaptureFixture
) -> None:
    server, _ = await rpc.serve(RecordingLedger(fail_first=1, fail_code=grpc.StatusCode.INTERNAL))
    stub = rpc.ledger(server)
    caplog.set_level(logging.INFO, logger="cnbrain.rpc")
    with request_id_scope("logged-1"), pytest.raises(grpc.aio.AioRpcError):
        await stub.Commit(commit_of("r1"), timeout=2)
    with request_id_scope("logged-2"):
        await stub.Commit(commit_of("r1"), timeout=2)
    lines = [r.getMessage() for r in caplog.records if r.name == "cnbrain.rpc"]
    assert any(
        "/cnbrain.v1.LedgerService/Commit" in line
        and "request_id=logged-1" in line
        and "code=INTERNAL" in line
        for line in lines
    ), lines
    assert any("request_id=logged-2" in line and "code=OK" in line for line in lines), lines
    assert [r.request_id for r in caplog.records if r.name == "cnbrain.rpc"] == [  # type: ignore[attr-defined]
        "logged-1",
        "logged-2",
    ]
