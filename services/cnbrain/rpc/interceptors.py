"""Interceptors every brain's server and client channels use.

Server side (`server_interceptors`, in this order):

- the tracing interceptor (`cnbrain.rpc.tracing`, only when tracing is on): each call runs
  inside its server span; a call without the peer token gets none, and the trace context
  it names is not followed.
- `RequestIdInterceptor`: each call runs with a request id (the caller's `x-request-id` when
  it is valid, else a new one) set in `cnbrain.rpc.context`, and is logged when it ends with
  its method, id, status code and duration, and counted and timed then (`cnbrain.rpc.metrics`,
  when the server has metrics). It is also the gRPC edge of the error tree
  (`cnbrain.domain.errors`): a handler's error of the tree ends the call with the status code
  of its kind and the error's message.
- `PeerTokenInterceptor` (only when a token is configured): every call must carry
  `authorization: Bearer <token>`, compared in constant time, else it ends UNAUTHENTICATED
  without reaching the servicer. Health and reflection are exempt, so probes need no token.

Client side (`client_interceptors`): every outgoing call carries `x-request-id` (the current
one when called inside a handler, else a new one; an id the caller put in the metadata wins)
and, when a token is configured, `authorization: Bearer <token>`.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
)
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from cnbrain.domain.errors import CnbrainError, ErrorKind
from cnbrain.rpc._handlers import wrap_handler
from cnbrain.rpc.context import (
    REQUEST_ID_HEADER,
    current_request_id,
    is_valid_request_id,
    new_request_id,
    request_id_scope,
)
from cnbrain.rpc.metrics import GrpcServerMetrics
from cnbrain.rpc.status import status_of
from cnbrain.rpc.tracing import tracing_server_interceptors

AUTHORIZATION_HEADER = "authorization"
HEALTH_SERVICE = "grpc.health.v1.Health"
REFLECTION_SERVICES = (
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
)
INFRASTRUCTURE_SERVICES: frozenset[str] = frozenset((HEALTH_SERVICE, *REFLECTION_SERVICES))
"""Services exempt from the peer token, and logged at DEBUG rather than INFO."""

log = logging.getLogger("cnbrain.rpc")

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_Call = TypeVar("_Call")
if TYPE_CHECKING:
    _Continuation = Callable[
        [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[_Req, _Resp] | None]
    ]
    _Context = grpc.aio.ServicerContext[Any, Any]


def service_of(method: str) -> str:
    """The full service name of a method path: "/pkg.Service/Method" -> "pkg.Service"."""
    return method.lstrip("/").partition("/")[0]


def _metadata_value(metadata: Iterable[tuple[str, str | bytes]] | None, key: str) -> str | None:
    for name, value in metadata or ():
        if name == key and isinstance(value, str):
            return value
    return None


STATUS_OF_KIND: dict[ErrorKind, grpc.StatusCode] = {
    "invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "not_found": grpc.StatusCode.NOT_FOUND,
    "forbidden": grpc.StatusCode.PERMISSION_DENIED,
    "conflict": grpc.StatusCode.FAILED_PRECONDITION,
    "exhausted": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "unavailable": grpc.StatusCode.UNAVAILABLE,
    "internal": grpc.StatusCode.INTERNAL,
}
"""The status code that ends a call whose handler raised an error of the tree."""


class RequestIdInterceptor(grpc.aio.ServerInterceptor):
    """Runs every call inside `request_id_scope`, ends one whose handler raised an error of the
    tree with its kind's code (`STATUS_OF_KIND`), logs its outcome and, with `metrics`,
    counts and times it there (see the module doc)."""

    def __init__(
        self,
        *,
        quiet_services: Collection[str] = INFRASTRUCTURE_SERVICES,
        metrics: GrpcServerMetrics | None = None,
    ) -> None:
        self._quiet = frozenset(quiet_services)
        self._metrics = metrics

    async def intercept_service(
        self,
        continuation: _Continuation[_Req, _Resp],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[_Req, _Resp] | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        incoming = _metadata_value(handler_call_details.invocation_metadata, REQUEST_ID_HEADER)
        level = logging.DEBUG if service_of(method) in self._quiet else logging.INFO
        series = None if self._metrics is None else self._metrics.method(method)

        @asynccontextmanager
        async def around(context: _Context) -> AsyncIterator[None]:
            request_id = (
                incoming if incoming and is_valid_request_id(incoming) else new_request_id()
            )
            if series is not None:
                series.started.inc()
            started = time.perf_counter()
            code = "OK"
            with request_id_scope(request_id):
                try:
                    yield
                    code = status_of(context, None).name
                except CnbrainError as exc:
                    status = STATUS_OF_KIND[exc.kind]
                    code = status.name
                    if exc.kind == "internal":
                        log.exception("rpc %s failed", method, exc_info=exc)
                    await context.abort(status, str(exc))
                except BaseException as exc:
                    code = status_of(context, exc).name
                    raise
                finally:
                    seconds = time.perf_counter() - started
                    if series is not None:
                        series.ended(code, seconds)
                    log.log(
                        level,
                        "rpc %s request_id=%s code=%s %.1f ms",
                        method,
                        request_id,
                        code,
                        seconds * 1000,
                        extra={"request_id": request_id},
                    )

        return wrap_handler(handler, around)


class PeerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Ends every call without `authorization: Bearer <token>` as UNAUTHENTICATED before it
    reaches the servicer; calls to `exempt_services` pass without a token."""

    def __init__(
        self, token: str, *, exempt_services: Collection[str] = INFRASTRUCTURE_SERVICES
    ) -> None:
        if not token:
            raise ValueError("empty peer token")
        self._expected = f"Bearer {token}".encode()
        self._exempt = frozenset(exempt_services)

    def authorised(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> bool:
        """True when `metadata` carries the expected authorization (constant-time compare)."""
        given = _metadata_value(metadata, AUTHORIZATION_HEADER)
        return given is not None and hmac.compare_digest(given.encode(), self._expected)

    async def intercept_service(
        self,
        continuation: _Continuation[_Req, _Resp],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[_Req, _Resp] | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if (
            handler is None
            or service_of(method) in self._exempt
            or self.authorised(handler_call_details.invocation_metadata)
        ):
            return handler
        return wrap_handler(handler, _refuse(method))


def _refuse(method: str) -> Callable[[_Context], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def around(context: _Context) -> AsyncIterator[None]:
        log.warning("rpc %s refused: missing or wrong peer token (peer %s)", method, context.peer())
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong peer token")
        yield  # never reached: abort raises

    return around


def server_interceptors(
    token: str | None, *, metrics: GrpcServerMetrics | None = None
) -> list[grpc.aio.ServerInterceptor]:
    """The server interceptors, outermost first (module docstring): tracing when it is on
    (a call without the token, when there is one, untraced), the request id (counting into
    `metrics`), then the token check if any."""
    peer = None if token is None else PeerTokenInterceptor(token)
    interceptors: list[grpc.aio.ServerInterceptor] = [
        *tracing_server_interceptors(admitted=None if peer is None else peer.authorised),
        RequestIdInterceptor(metrics=metrics),
    ]
    if peer is not None:
        interceptors.append(peer)
    return interceptors


class _OutgoingMetadata:
    """Adds the request id and the token to an outgoing call's details."""

    def __init__(self, token: str | None = None) -> None:
        self._authorization = None if token is None else f"Bearer {token}"

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        if metadata.get(REQUEST_ID_HEADER) is None:
            metadata[REQUEST_ID_HEADER] = current_request_id() or new_request_id()
        if self._authorization is not None:
            metadata[AUTHORIZATION_HEADER] = self._authorization
        return grpc.aio.ClientCallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            details.wait_for_ready,
        )

    async def _continue(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, _Req], Awaitable[_Call]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: _Req,
    ) -> _Call:
        """A call of one request, continued with the request id and the token in its details.
        gRPC files an interceptor under one kind of call only, hence one class per kind
        below, each with this method (or `_continue_stream`) under its kind's name."""
        return await continuation(self._details(client_call_details), request)

    async def _continue_stream(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, _Req], Awaitable[_Call]],
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: _Req,
    ) -> _Call:
        """`_continue` for a call of a stream of requests."""
        return await continuation(self._details(client_call_details), request_iterator)


class UnaryUnaryMetadataInterceptor(_OutgoingMetadata, grpc.aio.UnaryUnaryClientInterceptor):
    """Request id and token on unary-unary calls."""

    intercept_unary_unary = _OutgoingMetadata._continue


class UnaryStreamMetadataInterceptor(_OutgoingMetadata, grpc.aio.UnaryStreamClientInterceptor):
    """Request id and token on unary-stream calls."""

    intercept_unary_stream = _OutgoingMetadata._continue


class StreamUnaryMetadataInterceptor(_OutgoingMetadata, grpc.aio.StreamUnaryClientInterceptor):
    """Request id and token on stream-unary calls."""

    intercept_stream_unary = _OutgoingMetadata._continue_stream


class StreamStreamMetadataInterceptor(_OutgoingMetadata, grpc.aio.StreamStreamClientInterceptor):
    """Request id and token on stream-stream calls."""

    intercept_stream_stream = _OutgoingMetadata._continue_stream


def client_interceptors(token: str | None) -> list[grpc.aio.ClientInterceptor]:
    """One interceptor per call kind (a channel files each under exactly one kind)."""
    return [
        UnaryUnaryMetadataInterceptor(token),
        UnaryStreamMetadataInterceptor(token),
        StreamUnaryMetadataInterceptor(token),
        StreamStreamMetadataInterceptor(token),
    ]
