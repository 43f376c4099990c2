"""The shared peer token: required on every call to a brain's own services, compared as a
whole, not needed by health and reflection."""

import grpc
import pytest
from grpc_health.v1 import health_pb2

from cnbrain.rpc import PeerSecurity
from tests.rpc.probes import health_check
from tests.rpc.rpc_ledger import Rpc, prepare_of

pytestmark = pytest.mark.asyncio

TOKEN = "peer-secret-0123456789"


@pytest.mark.parametrize("client_token", [None, "wrong-secret", TOKEN + "x", TOKEN[:-1]], ids=str)
async def test_calls_without_the_token_are_refused_before_the_servicer(
    rpc: Rpc, client_token: str | None
) -> None:
    server, ledger = await rpc.serve(security=PeerSecurity(token=TOKEN))
    stub = rpc.ledger(server, security=PeerSecurity(token=client_token))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Prepare(prepare_of("r1"), timeout=2)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert ledger.calls == 0
    assert ledger.prepared == set()


async def test_calls_with_the_token_reach_the_servicer(rpc: Rpc) -> None:
    server, ledger = await rpc.serve(security=PeerSecurity(token=TOKEN))
    stub = rpc.ledger(server, security=PeerSecurity(token=TOKEN))
    answer = await stub.Prepare(prepare_of("r1"), timeout=2)
    assert answer.results[0].prepared
    assert ledger.prepared == {"r1"}
    assert ledger.metadata[0]["authorization"] == f"Bearer {TOKEN}"


async def test_health_answers_probes_without_the_token(rpc: Rpc) -> None:
    server, _ = await rpc.serve(security=PeerSecurity(token=TOKEN))
    answer = await health_check(rpc.channel(server))(
        health_pb2.HealthCheckRequest(service=""), timeout=2
    )
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_server_without_a_token_accepts_any_caller(rpc: Rpc) -> None:
    server, ledger = await rpc.serve()
    stub = rpc.ledger(server, security=PeerSecurity(token="anything"))
    await stub.Prepare(prepare_of("r1"), timeout=2)
    assert ledger.prepared == {"r1"}
