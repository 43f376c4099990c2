"""Traces across gRPC hops: with tracing on, a client span per call and a server span per
call handled, their context carried as `traceparent` in the metadata from brain to brain,
but none for a call refused for want of the peer token; with tracing off, no interceptor,
no span and no `traceparent`."""

from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from cnbrain.rpc import PeerSecurity
from cnbrain.rpc.tracing import tracing_client_interceptors, tracing_server_interceptors
from cnbrain.telemetry.spans import use_provider
from tests.rpc.probes import health_check
from tests.rpc.rpc_ledger import RecordingLedger, Rpc, prepare_of

pytestmark = pytest.mark.asyncio

PREPARE = "cnbrain.v1.LedgerService/Prepare"


def _recording() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """Tracing on in this process, into memory, for what the test builds."""
    provider, exporter = _recording()
    use_provider(provider)
    try:
        yield provider, exporter
    finally:
        use_provider(None)


def _parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def _span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    span_id: int = span.context.span_id
    return span_id


def _trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    trace_id: int = span.context.trace_id
    return trace_id


def _traceparent_trace(metadata: dict[str, str]) -> int:
    """The trace id in a `traceparent` (version-traceid-spanid-flags)."""
    _, trace_id, _, _ = metadata["traceparent"].split("-")
    return int(trace_id, 16)


async def test_one_trace_follows_a_call_from_brain_to_brain(
    rpc: Rpc, traced: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = traced
    downstream, last = await rpc.serve()
    upstream, first = await rpc.serve(RecordingLedger(forward_to=rpc.ledger(downstream)))
    with provider.get_tracer("test").start_as_current_span("the caller's"):
        await rpc.ledger(upstream).Prepare(prepare_of("r1"), timeout=2)

    spans = exporter.get_finished_spans()
    [root] = [s for s in spans if s.name == "the caller's"]
    clients = [s for s in spans if s.kind is SpanKind.CLIENT]
    servers = [s for s in spans if s.kind is SpanKind.SERVER]
    assert len(spans) == 5 and len(clients) == 2 and len(servers) == 2
    assert {_trace_id(s) for s in spans} == {_trace_id(root)}
    # caller -> client -> upstream server -> client -> downstream server
    [first_client] = [c for c in clients if _parent_id(c) == _span_id(root)]
    [upstream_server] = [s for s in servers if _parent_id(s) == _span_id(first_client)]
    [second_client] = [c for c in clients if _parent_id(c) == _span_id(upstream_server)]
    [downstream_server] = [s for s in servers if _parent_id(s) == _span_id(second_client)]
    assert downstream_server.parent is not None and downstream_server.parent.is_remote
    for span in (*clients, *servers):
        assert span.name == PREPARE
        assert span.attributes is not None
        assert span.attributes["rpc.system"] == "grpc"
        assert span.attributes["rpc.service"] == "cnbrain.v1.LedgerService"
        assert span.attributes["rpc.method"] == "Prepare"
        assert span.attributes["rpc.grpc.status_code"] == 0
        assert span.status.status_code is StatusCode.UNSET
    # both servers saw the W3C context, with the request id beside it
    for ledger in (first, last):
        assert _traceparent_trace(ledger.metadata[0]) == _trace_id(root)
        assert "x-request-id" in ledger.metadata[0]


async def test_a_client_span_covers_the_retries_and_each_attempt_has_its_server_span(
    rpc: Rpc, traced: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    _, exporter = traced
    server, ledger = await rpc.serve(RecordingLedger(fail_first=1))
    await rpc.ledger(server).Prepare(prepare_of("r1"), timeout=2)

    spans = exporter.get_finished_spans()
    [client] = [s for s in spans if s.kind is SpanKind.CLIENT]
    attempts = [s for s in spans if s.kind is SpanKind.SERVER]
    assert ledger.calls == 2 and len(attempts) == 2
    assert client.parent is None and client.status.status_code is StatusCode.UNSET
    assert all(_parent_id(s) == _span_id(client) for s in attempts)
    codes = [(s.attributes or {}).get("rpc.grpc.status_code") for s in attempts]
    assert sorted(codes, key=str) == [0, grpc.StatusCode.UNAVAILABLE.value[0]]
    failed = [s for s in attempts if s.status.status_code is StatusCode.ERROR]
    assert len(failed) == 1


async def test_a_refused_call_fails_the_client_span_not_the_servers(
    rpc: Rpc, traced: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    _, exporter = traced
    server, _ = await rpc.serve(
        RecordingLedger(fail_first=1, fail_code=grpc.StatusCode.INVALID_ARGUMENT)
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await rpc.ledger(server).Prepare(prepare_of("r1"), timeout=2)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT

    [client] = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT]
    [handled] = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert client.status.status_code is StatusCode.ERROR
    assert (client.attributes or {})["rpc.grpc.status_code"] == invalid
    assert handled.status.status_code is StatusCode.UNSET
    assert (handled.attributes or {})["rpc.grpc.status_code"] == invalid


async def test_a_call_without_the_peer_token_gets_no_span_whatever_trace_it_names(
    rpc: Rpc, traced: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    _, exporter = traced
    token = "peer-secret-0123456789"
    server, ledger = await rpc.serve(security=PeerSecurity(token=token))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await rpc.ledger(server, security=PeerSecurity(token="wrong")).Prepare(
            prepare_of("r1"), timeout=2
        )
    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
    [client] = exporter.get_finished_spans()  # the caller's own span, sent as its parent
    assert client.kind is SpanKind.CLIENT and ledger.metadata == []
    exporter.clear()
    await rpc.ledger(server, security=PeerSecurity(token=token)).Prepare(
        prepare_of("r2"), timeout=2
    )
    [handled] = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]
    [client] = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT]
    assert _parent_id(handled) == _span_id(client)  # with the token, traced as before


async def test_health_checks_are_not_traced(
    rpc: Rpc, traced: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    _, exporter = traced
    server, _ = await rpc.serve()
    check = health_check(rpc.channel(server))
    answer = await check(health_pb2.HealthCheckRequest(service=""), timeout=2)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
    assert [s.kind for s in exporter.get_finished_spans()] == [SpanKind.CLIENT]


async def test_with_tracing_off_no_span_is_made_and_no_traceparent_is_sent(rpc: Rpc) -> None:
    assert tracing_client_interceptors() == [] and tracing_server_interceptors() == []
    provider, exporter = _recording()
    downstream, last = await rpc.serve()
    upstream, first = await rpc.serve(RecordingLedger(forward_to=rpc.ledger(downstream)))
    # Even with a span current in the caller, nothing of it leaves the process.
    with provider.get_tracer("test").start_as_current_span("the caller's"):
        assert trace.get_current_span().get_span_context().is_valid
        await rpc.ledger(upstream).Prepare(prepare_of("r1"), timeout=2)

    assert [s.name for s in exporter.get_finished_spans()] == ["the caller's"]
    for ledger in (first, last):
        assert ledger.calls == 1
        assert "traceparent" not in ledger.metadata[0]
        assert "x-request-id" in ledger.metadata[0]
