"""The regional brain's Prometheus metrics, read at `GET /metrics` (the text exposition
format): its REST calls and its decisions.

- `cnbrain_http_requests_total{method, route, status}`: calls answered, by the route's
  template (`/v1/requests/{request_id}`; `unmatched` for no route), so that ids make no
  series of their own;
- `cnbrain_http_request_duration_seconds{method, route}`: the time to answer them;
- `cnbrain_decisions_total{outcome}`: the submissions this brain decided, by what became of
  them (`placed`, `queued`, `rejected`); a submission forwarded to another region counts
  there;
- `cnbrain_site_capacity{site, resource}` and `cnbrain_site_free{site, resource}`: of the
  sites this brain owns, CPU cores, GiB of memory and each accelerator model (`resource` is
  `cpu_cores`, `memory_gib` or the model), as its ledger holds them when scraped;
  `cnbrain_link_utilisation{link}`: the share of each of its links' bandwidth reserved;
  `cnbrain_ledger_read` is 1 when the scrape read the ledger, 0 when its database did not
  answer (the capacity series then keep their last values).

Each brain process has its own registry; no label names a tenant or a request.
"""

import time
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cnbrain.domain.accelerators import MILLI
from cnbrain.federation.ownership import Ownership
from cnbrain.ledger.snapshot import Snapshot

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

        self.site_capacity = Gauge(
            "cnbrain_site_capacity",
            "A site's capacity: CPU cores, GiB of memory, accelerators of each model.",
            ["site", "resource"],
            registry=self.registry,
        )
        self.site_free = Gauge(
            "cnbrain_site_free",
            "What a site has free now, as the brain's ledger holds it.",
            ["site", "resource"],
            registry=self.registry,
        )
        self.link_utilisation = Gauge(
            "cnbrain_link_utilisation",
            "The share of a link's bandwidth reserved now.",
            ["link"],
            registry=self.registry,
        )
        self.ledger_read = Gauge(
            "cnbrain_ledger_read",
            "1 when the last scrape read the ledger, 0 when its database did not answer.",
            registry=self.registry,
        )

    def decided(self, outcome: str) -> None:
        self.decisions.labels(outcome=outcome).inc()

    def ledger(self, snapshot: Snapshot | None, ownership: Ownership) -> None:
        """Set the capacity series from `snapshot`, for the sites and links of `ownership`
        (None: the ledger could not be read; the series keep their values)."""
        self.ledger_read.set(0 if snapshot is None else 1)
        if snapshot is None:
            return
        arrays = snapshot.arrays
        cmap = arrays.map
        models = cmap.accelerator_models
        for i, site in enumerate(cmap.sites):
            if not ownership.sites[i]:
                continue
            amounts = [
                ("cpu_cores", arrays.cap_cpu_m[i] / 1000, snapshot.free_cpu_m[i] / 1000),
                ("memory_gib", arrays.cap_mem_mib[i] / 1024, snapshot.free_mem_mib[i] / 1024),
            ]
            amounts += [
                (model, arrays.cap_acc[i, k] / MILLI, snapshot.free_acc[i, k] / MILLI)
                for k, model in enumerate(models)
                if arrays.cap_acc[i, k]
            ]
            for resource, capacity, free in amounts:
                self.site_capacity.labels(site=site.id, resource=resource).set(capacity)
                self.site_free.labels(site=site.id, resource=resource).set(max(free, 0.0))
        for j, link in enumerate(cmap.links):
            capacity = int(arrays.link_cap_mbps[j])
            if capacity and ownership.links[j]:
                used = capacity - int(snapshot.residual_mbps[j])
                self.link_utilisation.labels(link=link.id).set(used / capacity)

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
