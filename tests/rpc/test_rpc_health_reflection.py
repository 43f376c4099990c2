"""Health and reflection on every server; graceful shutdown; start-up errors."""

import asyncio
import socket

import grpc
import pytest
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from cnbrain.rpc import PeerSecurity, start_server
from tests.rpc.probes import HealthCheck, health_check, reflection_info
from tests.rpc.rpc_ledger import LEDGER_SERVICE, RecordingLedger, Rpc, prepare_of

pytestmark = pytest.mark.asyncio

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def _status(check: HealthCheck, service: str) -> int:
    answer = await check(health_pb2.HealthCheckRequest(service=service), timeout=2)
    return answer.status


async def test_health_follows_set_serving(rpc: Rpc) -> None:
    server, _ = await rpc.serve()
    health = health_check(rpc.channel(server))
    assert await _status(health, LEDGER_SERVICE) == SERVING
    assert await _status(health, "") == SERVING
    await server.set_serving(False)
    assert await _status(health, LEDGER_SERVICE) == NOT_SERVING
    assert await _status(health, "") == NOT_SERVING
    await server.set_serving(True)
    assert await _status(health, LEDGER_SERVICE) == SERVING


async def test_health_does_not_know_unregistered_services(rpc: Rpc) -> None:
    server, _ = await rpc.serve()
    health = health_check(rpc.channel(server))
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await _status(health, "cnbrain.v1.NationalBrainService")
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


async def test_reflection_lists_the_services(rpc: Rpc) -> None:
    server, _ = await rpc.serve()
    call = reflection_info(rpc.channel(server))(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=2
    )
    answers = [answer async for answer in call]
    names = {s.name for s in answers[0].list_services_response.service}
    assert names == {
        LEDGER_SERVICE,
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }


async def test_reflection_serves_the_service_descriptor(rpc: Rpc) -> None:
    server, _ = await rpc.serve()
    call = reflection_info(rpc.channel(server))(
        iter([reflection_pb2.ServerReflectionRequest(file_containing_symbol=LEDGER_SERVICE)]),
        timeout=2,
    )
    answers = [answer async for answer in call]
    files = answers[0].file_descriptor_response.file_descriptor_proto
    assert files, answers[0]
    assert any(b"LedgerService" in serialized for serialized in files)


async def test_stop_reports_not_serving_and_lets_calls_in_flight_finish(rpc: Rpc) -> None:
    server, ledger = await rpc.serve(RecordingLedger(delay_s=0.5))
    stub = rpc.ledger(server)
    health = health_check(rpc.channel(server))
    in_flight = asyncio.ensure_future(stub.Prepare(prepare_of("r1"), timeout=5))
    while ledger.calls == 0:
        await asyncio.sleep(0.01)
    stopping = asyncio.create_task(server.stop(3))
    await asyncio.sleep(0.05)
    answer = await in_flight
    await stopping
    assert answer.results[0].prepared and ledger.finished == 1
    with pytest.raises(grpc.aio.AioRpcError) as after:
        await _status(health, "")
    assert after.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_stop_cancels_calls_still_running_after_the_grace_period(rpc: Rpc) -> None:
    server, ledger = await rpc.serve(RecordingLedger(delay_s=5))
    stub = rpc.ledger(server)
    in_flight = asyncio.ensure_future(stub.Prepare(prepare_of("r1"), timeout=10))
    while ledger.calls == 0:
        await asyncio.sleep(0.01)
    started = asyncio.get_running_loop().time()
    await server.stop(0.2)
    assert asyncio.get_running_loop().time() - started < 2
    with pytest.raises(grpc.aio.AioRpcError):
        await in_flight
    assert ledger.finished == 0


async def test_unknown_service_names_are_refused_at_start() -> None:
    with pytest.raises(ValueError, match=r"cnbrain\.v1\.NoSuchService"):
        await start_server(
            address="127.0.0.1:0",
            security=PeerSecurity(),
            register=lambda server: ["cnbrain.v1.NoSuchService"],
        )


async def test_a_taken_port_fails_to_bind() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"127.0.0.1:{port}"):
            await start_server(
                address=f"127.0.0.1:{port}", security=PeerSecurity(), register=lambda server: []
            )
