"""Deadlines end slow calls; calls that end UNAVAILABLE are tried again, up to MAX_ATTEMPTS
times, and no other failure is retried."""

import re
import time
from pathlib import Path

import grpc
import pytest

from cnbrain.rpc import MAX_ATTEMPTS
from cnbrain.rpc.client import RETRIED_SERVICES
from tests.rpc.rpc_ledger import RecordingLedger, Rpc, commit_of, prepare_of, release_of

pytestmark = pytest.mark.asyncio


async def test_a_slow_handler_ends_at_the_callers_deadline(rpc: Rpc) -> None:
    server, ledger = await rpc.serve(RecordingLedger(delay_s=3))
    stub = rpc.ledger(server)
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as late:
        await stub.Prepare(prepare_of("r1"), timeout=0.3)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - started < 2
    assert ledger.calls == 1


async def test_a_call_that_fails_unavailable_once_succeeds_on_the_second_attempt(
    rpc: Rpc,
) -> None:
    server, ledger = await rpc.serve(RecordingLedger(fail_first=1))
    stub = rpc.ledger(server)
    answer = await stub.Prepare(prepare_of("r1"), timeout=3)
    assert answer.results[0].prepared
    assert ledger.calls == 2
    assert ledger.prepared == {"r1"}
    # The retry is the same call: same request id, marked as a later attempt.
    assert ledger.request_ids[0] == ledger.request_ids[1]
    assert ledger.metadata[1].get("grpc-previous-rpc-attempts") == "1"


async def test_retries_stop_after_max_attempts(rpc: Rpc) -> None:
    server, ledger = await rpc.serve(RecordingLedger(fail_first=10))
    stub = rpc.ledger(server)
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await stub.Release(release_of("r1"), timeout=5)
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert ledger.calls == MAX_ATTEMPTS == 3


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    ],
)
async def test_other_failures_are_not_retried(rpc: Rpc, code: grpc.StatusCode) -> None:
    server, ledger = await rpc.serve(RecordingLedger(fail_first=1, fail_code=code))
    stub = rpc.ledger(server)
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await stub.Commit(commit_of("r1"), timeout=3)
    assert failed.value.code() == code
    assert ledger.calls == 1


async def test_a_peer_that_is_down_fails_unavailable_within_the_deadline(rpc: Rpc) -> None:
    server, _ = await rpc.serve()
    port = server.port
    await server.stop(0)
    stub = rpc.ledger(f"127.0.0.1:{port}")
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as down:
        await stub.Prepare(prepare_of("r1"), timeout=2)
    assert down.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert time.monotonic() - started < 2.5


async def test_the_retry_policy_covers_every_service_of_the_contracts() -> None:
    protos = Path(__file__).resolve().parents[2] / "protos" / "cnbrain" / "v1"
    declared = {
        f"cnbrain.v1.{name}"
        for proto in protos.glob("*.proto")
        for name in re.findall(r"^service\s+(\w+)", proto.read_text(), flags=re.MULTILINE)
    }
    assert len(declared) >= 3
    assert set(RETRIED_SERVICES) == declared
