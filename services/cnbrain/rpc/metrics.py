"""Prometheus metrics of a brain's gRPC server, counted by `MetricsInterceptor`.

- `cnbrain_grpc_server_started_total{service, method}`: calls begun;
- `cnbrain_grpc_server_handled_total{service, method, code}`: calls ended, by status code
  (`OK`, `UNAVAILABLE`, `UNAUTHENTICATED`, ...; `CANCELLED` when the caller went away,
  `UNKNOWN` for an unexpected error);
- `cnbrain_grpc_server_handling_seconds{service, method}`: the time from a call's start to
  its end (a stream's whole life).

`service` and `method` are those the server serves (a call of a method it does not serve
is counted nowhere), so the label sets are bounded; no label names a caller or a request.
The interceptor goes outermost, so it sees every call as it ends, a refusal of the peer
token included. Its cost is a dictionary look-up, two counter increments and one histogram
observation per call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram

from cnbrain.rpc._handlers import wrap_handler

HANDLING_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
)
"""Seconds: a ledger call takes a millisecond or two, a cross-region placement up to 15 s."""

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
if TYPE_CHECKING:
    _Context = grpc.aio.ServicerContext[Any, Any]


class GrpcServerMetrics:
    """The gRPC server's metric families (module docstring), registered in `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.started = Counter(
            "cnbrain_grpc_server_started",
            "gRPC calls begun on this brain's server, by service and method.",
            ["service", "method"],
            registry=registry,
        )
        self.handled = Counter(
            "cnbrain_grpc_server_handled",
            "gRPC calls ended on this brain's server, by service, method and status code.",
            ["service", "method", "code"],
            registry=registry,
        )
        self.seconds = Histogram(
            "cnbrain_grpc_server_handling_seconds",
            "Time from a gRPC call's start to its end, by service and method.",
            ["service", "method"],
            buckets=HANDLING_BUCKETS,
            registry=registry,
        )


class _Method:
    """The series of one method, looked up once (each code's on its first use)."""

    __slots__ = ("_codes", "_handled", "_labels", "seconds", "started")

    def __init__(self, metrics: GrpcServerMetrics, path: str) -> None:
        service, _, method = path.lstrip("/").partition("/")
        self._labels = (service, method)
        self._handled = metrics.handled
        self._codes: dict[str, Any] = {}
        self.started = metrics.started.labels(service, method)
        self.seconds = metrics.seconds.labels(service, method)

    def ended(self, code: str) -> None:
        counter = self._codes.get(code)
        if counter is None:
            counter = self._codes[code] = self._handled.labels(*self._labels, code)
        counter.inc()


class _Call(AbstractAsyncContextManager[None]):
    """Counts and times one call of `method`."""

    __slots__ = ("_context", "_method", "_started")

    def __init__(self, method: _Method, context: _Context) -> None:
        self._method = method
        self._context = context
        self._started = 0.0

    async def __aenter__(self) -> None:
        self._method.started.inc()
        self._started = time.perf_counter()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        method = self._method
        method.seconds.observe(time.perf_counter() - self._started)
        method.ended(_code(self._context, exc))


def _code(context: _Context, exc: BaseException | None) -> str:
    """The status code a call ends with: the one set on `context` when it returned or was
    aborted, CANCELLED when cancelled, UNKNOWN for another error."""
    if exc is None or isinstance(exc, grpc.aio.AbortError):
        code = context.code()
        return code.name if isinstance(code, grpc.StatusCode) else "OK"
    if isinstance(exc, asyncio.CancelledError):
        return "CANCELLED"
    return "UNKNOWN"


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Counts and times every call the server serves into `metrics` (module docstring)."""

    def __init__(self, metrics: GrpcServerMetrics) -> None:
        self._metrics = metrics
        self._methods: dict[str, _Method] = {}

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[_Req, _Resp] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[_Req, _Resp] | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        path = handler_call_details.method
        method = self._methods.get(path)
        if method is None:
            method = self._methods[path] = _Method(self._metrics, path)
        return wrap_handler(handler, lambda context: _Call(method, context))
