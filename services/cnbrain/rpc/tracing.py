"""Traces across brains: a client span for each call a brain makes, a server span for each
call it handles, the trace context carried in the call's metadata.

With tracing on (`cnbrain.telemetry.spans.tracing_on`, asked when a channel or server is
built), `tracing_client_interceptors` and `tracing_server_interceptors` give the
interceptors that `open_channel` and `start_server` put first, outermost; with it off they
give none, so an untraced brain runs no tracing code at all on a call.

- Client: each unary call gets a span of kind CLIENT named after its method
  ("cnbrain.v1.LedgerService/Prepare"), a child of the current span, open until the call
  ends; its trace context goes in the call's metadata as W3C `traceparent` (by the
  configured propagator, `OTEL_PROPAGATORS`, W3C trace context and baggage by default).
- Server: each unary call runs inside a span of kind SERVER of the same name, the child of
  the caller's span when the metadata carries one (else the root of a new trace), current
  for the handler: the calls it makes in turn carry it on. A call the server refuses for
  want of the peer token gets no span: an unauthenticated caller cannot have a span made,
  nor name the trace it joins.

Both record `rpc.system`, `rpc.service`, `rpc.method` and `rpc.grpc.status_code`, and mark
the span failed as OpenTelemetry's conventions say (the client on any code but OK, the
server on the codes that are the server's fault). Not traced: health and reflection, and
the streaming calls (a region's summaries stream lasts as long as its link).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace import SpanKind, Status, StatusCode

from cnbrain.rpc._handlers import wrap_handler
from cnbrain.rpc.status import status_of
from cnbrain.telemetry.spans import tracer

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_Call = TypeVar("_Call")
if TYPE_CHECKING:
    _Continuation = Callable[
        [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[_Req, _Resp] | None]
    ]
    _Context = grpc.aio.ServicerContext[Any, Any]

UNTRACED_SERVICES: frozenset[str] = frozenset(
    (
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection",
    )
)
"""Services whose calls get no span."""

SERVER_ERRORS: frozenset[grpc.StatusCode] = frozenset(
    (
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    )
)
"""The codes that mark a server span failed (the others are the caller's doing)."""

Metadata = Iterable[tuple[str, str | bytes]]


class _MetadataGetter(Getter[Metadata]):
    def get(self, carrier: Metadata, key: str) -> list[str] | None:
        values = [v for k, v in carrier if k == key and isinstance(v, str)]
        return values or None

    def keys(self, carrier: Metadata) -> list[str]:
        return [k for k, _ in carrier]


class _MetadataSetter(Setter[grpc.aio.Metadata]):
    def set(self, carrier: grpc.aio.Metadata, key: str, value: str) -> None:
        carrier[key] = value


_GETTER = _MetadataGetter()
_SETTER = _MetadataSetter()


def _names(method: str | bytes) -> tuple[str, dict[str, str]]:
    """The span name and attributes of a call of `method` ("/pkg.Service/Method")."""
    path = method.decode() if isinstance(method, bytes) else method
    name = path.lstrip("/")
    service, _, rpc_method = name.partition("/")
    return name, {"rpc.system": "grpc", "rpc.service": service, "rpc.method": rpc_method}


def _end_with(span: trace.Span, code: grpc.StatusCode, *, failed: bool) -> None:
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if failed:
        span.set_status(Status(StatusCode.ERROR, code.name))


class TracingServerInterceptor(grpc.aio.ServerInterceptor):
    """Runs every unary call of a traced service inside its server span (module doc); with
    `admitted`, only the calls whose metadata it admits (the others the peer-token check
    refuses)."""

    def __init__(
        self, tracer: trace.Tracer, *, admitted: Callable[[Metadata | None], bool] | None = None
    ) -> None:
        self._tracer = tracer
        self._admitted = admitted

    async def intercept_service(
        self,
        continuation: _Continuation[_Req, _Resp],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[_Req, _Resp] | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        name, attributes = _names(handler_call_details.method)
        if attributes["rpc.service"] in UNTRACED_SERVICES:
            return handler
        metadata = handler_call_details.invocation_metadata
        if self._admitted is not None and not self._admitted(metadata):
            return handler
        parent = propagate.extract(metadata or (), getter=_GETTER)
        tracer = self._tracer

        @asynccontextmanager
        async def around(context: _Context) -> AsyncIterator[None]:
            with tracer.start_as_current_span(
                name,
                context=parent,
                kind=SpanKind.SERVER,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                try:
                    yield
                except grpc.aio.AbortError as exc:
                    code = status_of(context, exc)
                    _end_with(span, code, failed=code in SERVER_ERRORS)
                    raise
                except BaseException as exc:
                    # What escapes the other interceptors ends the call UNKNOWN (CANCELLED
                    # for a cancelled handler).
                    code = status_of(context, exc)
                    if isinstance(exc, Exception):
                        span.record_exception(exc)
                    _end_with(span, code, failed=code is not grpc.StatusCode.CANCELLED)
                    raise
                code = status_of(context, None)
                _end_with(span, code, failed=code in SERVER_ERRORS)

        return wrap_handler(handler, around)


class TracingClientInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """A client span around every unary call, its context in the call's metadata (module
    doc). The call is awaited here, so the span ends when the call does; the caller gets
    the call itself, answer or error unchanged."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, _Req], Awaitable[_Call]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: _Req,
    ) -> _Call:
        details = client_call_details
        name, attributes = _names(details.method)
        span = self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        propagate.inject(metadata, context=trace.set_span_in_context(span), setter=_SETTER)
        details = grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )
        # The interceptors inside this one (request id, token) run with the span current.
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            call = await continuation(details, request)
        except BaseException as exc:
            if isinstance(exc, Exception):
                span.record_exception(exc)
            _end_with(span, grpc.StatusCode.UNKNOWN, failed=True)
            span.end()
            raise
        finally:
            otel_context.detach(token)
        code = grpc.StatusCode.OK
        try:
            await call  # type: ignore[misc]
        except grpc.aio.AioRpcError as error:
            code = error.code()
        except BaseException:
            code = grpc.StatusCode.CANCELLED
            raise
        finally:
            _end_with(span, code, failed=code is not grpc.StatusCode.OK)
            span.end()
        return call


def tracing_server_interceptors(
    *, admitted: Callable[[Metadata | None], bool] | None = None
) -> list[grpc.aio.ServerInterceptor]:
    """The tracing server interceptor when tracing is on, else none; with `admitted`, it
    traces only the calls whose metadata it admits (those with the peer token)."""
    traced_by = tracer()
    if traced_by is None:
        return []
    return [TracingServerInterceptor(traced_by, admitted=admitted)]


def tracing_client_interceptors() -> list[grpc.aio.ClientInterceptor]:
    """The tracing client interceptor when tracing is on, else none."""
    traced_by = tracer()
    return [] if traced_by is None else [TracingClientInterceptor(traced_by)]
