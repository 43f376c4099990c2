"""The gRPC server's metrics (`cnbrain.rpc.metrics`): every call a server with metrics serves
is counted when it begins and when it ends, with the status code it ended with (the handler's
own, an error of the tree's, UNKNOWN for another exception, UNAUTHENTICATED for a call
refused without the peer token), and timed."""

import grpc
import pytest
from prometheus_client import CollectorRegistry

from cnbrain.domain.errors import Exhausted
from cnbrain.rpc import PeerSecurity, start_server
from cnbrain.rpc.metrics import GrpcServerMetrics
from cnbrain.v1 import ledger_pb2_grpc
from tests.polling import wait_until
from tests.rpc.rpc_ledger import LEDGER_SERVICE, RecordingLedger, Rpc, prepare_of

pytestmark = pytest.mark.asyncio

PREPARE = {"service": LEDGER_SERVICE, "method": "Prepare"}


async def _serve(rpc: Rpc, ledger: RecordingLedger, token: str) -> tuple[int, CollectorRegistry]:
    registry = CollectorRegistry()

    def register(server: grpc.aio.Server) -> list[str]:
        ledger_pb2_grpc.add_LedgerServiceServicer_to_server(ledger, server)
        return [LEDGER_SERVICE]

    running = await start_server(
        address="127.0.0.1:0",
        security=PeerSecurity(token=token),
        register=register,
        metrics=GrpcServerMetrics(registry),
    )
    rpc.servers.append(running)
    return running.port, registry


def _handled(registry: CollectorRegistry, code: str) -> float:
    value = registry.get_sample_value(
        "cnbrain_grpc_server_handled_total", {**PREPARE, "code": code}
    )
    return value or 0.0


async def test_every_call_is_counted_with_the_code_it_ended_with_and_timed(rpc: Rpc) -> None:
    failing = RecordingLedger(fail_first=1, fail_code=grpc.StatusCode.FAILED_PRECONDITION)
    port, registry = await _serve(rpc, failing, "secret")
    stub = rpc.ledger(f"127.0.0.1:{port}", security=PeerSecurity(token="secret"))
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.Prepare(prepare_of("r1"), timeout=2)  # aborted by the handler
    await stub.Prepare(prepare_of("r2"), timeout=2)
    await stub.Prepare(prepare_of("r3"), timeout=2)
    stranger = rpc.ledger(f"127.0.0.1:{port}", security=PeerSecurity(token="wrong"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stranger.Prepare(prepare_of("r4"), timeout=2)
    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED

    # The server counts a call once it has ended, which may be after the client's answer.
    await wait_until(lambda: _handled(registry, "UNAUTHENTICATED") == 1, 5.0)
    assert _handled(registry, "OK") == 2
    assert _handled(registry, "FAILED_PRECONDITION") == 1
    assert registry.get_sample_value("cnbrain_grpc_server_started_total", PREPARE) == 4
    timed = registry.get_sample_value("cnbrain_grpc_server_handling_seconds_count", PREPARE)
    assert timed == 4
    assert (registry.get_sample_value("cnbrain_grpc_server_handling_seconds_sum", PREPARE) or 0) > 0


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (Exhausted("rate spent", retry_after_s=1.0), "RESOURCE_EXHAUSTED"),
        (KeyError("r1"), "UNKNOWN"),
    ],
)
async def test_an_error_of_the_handler_is_counted_with_its_code(
    rpc: Rpc, error: Exception, code: str
) -> None:
    port, registry = await _serve(rpc, RecordingLedger(raises=error), "secret")
    stub = rpc.ledger(f"127.0.0.1:{port}", security=PeerSecurity(token="secret"))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.Prepare(prepare_of("r1"), timeout=2)
    assert raised.value.code().name == code
    await wait_until(lambda: _handled(registry, code) == 1, 5.0)
    assert _handled(registry, "OK") == 0
