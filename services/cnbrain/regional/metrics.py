"""The regional brain's Prometheus metrics, read at `GET /metrics` (the text exposition
format): its REST calls and its decisions.

- `cnbrain_http_requests_total{method, route, status}`: calls answered, by the route's
  template (`/v1/requests/{request_id}`; `unmatched` for no route), so that ids make no
  series of their own;
- `cnbrain_http_request_duration_seconds{method, route}`: the time to answer them;
- `cnbrain_decisions_total{outcome}`: the submissions this brain decided, by what became of
  them (`placed`, `queued`, `rejected`); a submission forwarded to another region counts
  there.

Each brain process has its own registry; no label names a tenant or a request.
"""

import time
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DURATION_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
"""Seconds: a submission takes a few milliseconds, a cross-region one up to seconds."""


class Metrics:
    """The metrics of one brain process (module docstring)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.http_requests = Counter(
            "cnbrain_http_requests",
            "REST calls answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_seconds = Histogram(
            "cnbrain_http_request_duration_seconds",
            "Time to answer a REST call, by method and route template.",
            ["method", "route"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.decisions = Counter(
            "cnbrain_decisions",
            "Submissions decided by this brain, by outcome (placed, queued, rejected).",
            ["outcome"],
            registry=self.registry,
        )

    def decided(self, outcome: str) -> None:
        self.decisions.labels(outcome=outcome).inc()

    def exposition(self) -> bytes:
        """Every metric in the text exposition format."""
        return generate_latest(self.registry)


class HttpMetrics:
    """An ASGI middleware that counts and times every REST call into `metrics`."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def seen(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, seen)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope["method"]
            metrics = self.metrics
            metrics.http_requests.labels(method=method, route=route, status=str(status)).inc()
            metrics.http_seconds.labels(method=method, route=route).observe(
                time.perf_counter() - started
            )
