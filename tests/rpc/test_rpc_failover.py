"""Calls to a service of several replicas (`rpc.failover`), on real gRPC servers: a replica
that is unavailable is passed over, the one that answered is kept, and any other failure is
the call's answer."""

from typing import TYPE_CHECKING

import grpc
import pytest

from cnbrain.rpc.failover import MAX_REPLICAS, Failover, endpoints_of
from cnbrain.v1 import ledger_pb2_grpc
from tests.processes import free_port
from tests.rpc.rpc_ledger import RecordingLedger, Rpc, prepare_of

if TYPE_CHECKING:
    Stub = ledger_pb2_grpc.LedgerServiceAsyncStub


@pytest.mark.asyncio
async def test_a_call_goes_on_to_the_next_replica_when_one_is_down_and_stays_there(
    rpc: Rpc,
) -> None:
    server, ledger = await rpc.serve()
    down = f"127.0.0.1:{free_port()}"
    replicas: Failover[Stub] = Failover([rpc.ledger(down), rpc.ledger(server)])
    await replicas.call(lambda stub: stub.Prepare(prepare_of("r1"), timeout=5))
    assert ledger.prepared == {"r1"}
    assert replicas.current == 1
    await replicas.call(lambda stub: stub.Prepare(prepare_of("r2"), timeout=5))
    assert ledger.prepared == {"r1", "r2"}
    assert ledger.calls == 2  # the second call went to the replica that answered at once


@pytest.mark.asyncio
async def test_a_refusal_or_a_deadline_is_the_answer_and_no_other_replica_is_asked_for_it(
    rpc: Rpc,
) -> None:
    refusing, _ = await rpc.serve(
        RecordingLedger(fail_first=1, fail_code=grpc.StatusCode.FAILED_PRECONDITION)
    )
    slow, slow_ledger = await rpc.serve(RecordingLedger(delay_s=1.0))
    spare, spare_ledger = await rpc.serve()
    replicas: Failover[Stub] = Failover([rpc.ledger(refusing), rpc.ledger(spare)])
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await replicas.call(lambda stub: stub.Prepare(prepare_of("r1"), timeout=5))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    late: Failover[Stub] = Failover([rpc.ledger(slow), rpc.ledger(spare)])
    with pytest.raises(grpc.aio.AioRpcError) as deadline:
        await late.call(lambda stub: stub.Prepare(prepare_of("r2"), timeout=0.2))
    assert deadline.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert slow_ledger.calls == 1
    assert spare_ledger.calls == 0
    assert (replicas.current, late.current) == (0, 1)  # the next call goes to the spare


@pytest.mark.asyncio
async def test_when_every_replica_is_down_the_last_error_is_raised(rpc: Rpc) -> None:
    replicas: Failover[Stub] = Failover(
        [rpc.ledger(f"127.0.0.1:{free_port()}"), rpc.ledger(f"127.0.0.1:{free_port()}")]
    )
    with pytest.raises(grpc.aio.AioRpcError) as down:
        await replicas.call(lambda stub: stub.Prepare(prepare_of("r1"), timeout=5))
    assert down.value.code() == grpc.StatusCode.UNAVAILABLE


def test_replicas_are_counted() -> None:
    with pytest.raises(ValueError, match="from 1 to 8 replicas"):
        Failover([])
    with pytest.raises(ValueError, match="not 9"):
        Failover([object()] * (MAX_REPLICAS + 1))


def test_endpoints_are_host_port_each_once() -> None:
    assert endpoints_of("127.0.0.1:50051") == ["127.0.0.1:50051"]
    assert endpoints_of("a:1, b.example:65535") == ["a:1", "b.example:65535"]
    for wrong, says in [
        ("", "is not host:port"),
        ("a:1,", "is not host:port"),
        ("a", "is not host:port"),
        ("a:0", "port 1 to 65535"),
        ("a:65536", "port 1 to 65535"),
        ("a b:1", "is not host:port"),
        ("a\x00b:1", "is not host:port"),
        ("a:1,a:1", "named twice"),
        (",".join(f"h{i}:1" for i in range(MAX_REPLICAS + 1)), "from 1 to 8 endpoints"),
    ]:
        with pytest.raises(ValueError, match=says):
            endpoints_of(wrong)
