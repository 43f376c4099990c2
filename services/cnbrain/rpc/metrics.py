"""Prometheus metrics of a brain's gRPC server, counted by `RequestIdInterceptor`
(`cnbrain.rpc.interceptors`) as it ends each call.

- `cnbrain_grpc_server_started_total{service, method}`: calls begun;
- `cnbrain_grpc_server_handled_total{service, method, code}`: calls ended, by status code
  (`OK`, `UNAVAILABLE`, `UNAUTHENTICATED`, ...; `CANCELLED` when the caller went away,
  `UNKNOWN` for an unexpected error);
- `cnbrain_grpc_server_handling_seconds{service, method}`: the time from a call's start to
  its end (a stream's whole life).

`service` and `method` are those the server serves (a call of a method it does not serve
is counted nowhere), so the label sets are bounded; no label names a caller or a request.
The request-id interceptor goes outside the peer-token check, so it counts every call as it
ends, a refusal of the token included. Its cost per call is a dictionary look-up, two
counter increments and one histogram observation, in the interceptor's own bracket around
the call (the one that logs it).
"""

from __future__ import annotations

from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Histogram

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
        self._methods: dict[str, MethodSeries] = {}

    def method(self, path: str) -> MethodSeries:
        """The series of the method at `path` ("/pkg.Service/Method")."""
        series = self._methods.get(path)
        if series is None:
            series = self._methods[path] = MethodSeries(self, path)
        return series


class MethodSeries:
    """The series of one method, looked up once (each code's on its first use)."""

    __slots__ = ("_codes", "_handled", "_labels", "_seconds", "started")

    def __init__(self, metrics: GrpcServerMetrics, path: str) -> None:
        service, _, method = path.lstrip("/").partition("/")
        self._labels = (service, method)
        self._handled = metrics.handled
        self._codes: dict[str, Any] = {}
        self.started = metrics.started.labels(service, method)
        self._seconds = metrics.seconds.labels(service, method)

    def ended(self, code: str, seconds: float) -> None:
        """Count a call that ended with status `code` after `seconds`."""
        self._seconds.observe(seconds)
        counter = self._codes.get(code)
        if counter is None:
            counter = self._codes[code] = self._handled.labels(*self._labels, code)
        counter.inc()
