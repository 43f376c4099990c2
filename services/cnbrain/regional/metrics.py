"""The regional brain's Prometheus metrics, read at `GET /metrics` of its metrics listener
(`regional.metrics_listener`; the text exposition format). Each brain process has its own
registry; no label names a tenant or a request.

- `cnbrain_brain_info{brain, region, version}`: 1, naming the brain (`regional`,
  `standalone`), its region (empty when standalone) and cnbrain's version;
- `cnbrain_http_requests_total{method, route, status}`: calls answered, by the route's
  template (`/v1/requests/{request_id}`; `unmatched` for no route), so that ids make no
  series of their own;
- `cnbrain_http_request_duration_seconds{method, route}`: the time to answer them;
- `cnbrain_decisions_total{outcome, reason}`: the submissions this brain decided (made here
  or forwarded here by another region; a submission forwarded to another region counts
  there), by what became of them (`placed`, `queued`, `rejected`, `failed`) and a reason of
  a few fixed words (`regional.decision_reasons`); group members count one each;
- `cnbrain_decision_duration_seconds{outcome}`: the time from a submission's intake to its
  decision (its place in the group commit, the engine, the reservation, and for one only
  the national brain can place, the escalation);
- `cnbrain_admission_round_duration_seconds`: the time of each round of the admission loop
  (`regional.admission_loop`) on the instance that holds its lease;
  `cnbrain_admission_requests_total{outcome}`: what the rounds did with queued requests
  (`admitted` here, `placed_elsewhere` by the national brain, `rejected`);
- the queue by priority class (`regional.queue_metrics`): `cnbrain_queue_length{class}`,
  `cnbrain_queue_oldest_wait_seconds{class}`, `cnbrain_queue_wait_objective_seconds{class}`;
- `cnbrain_preemptions_total`: running requests preempted (requeued) for a request of a
  higher class, of this region's queue or of another region's (`MakeRoom`);
- `cnbrain_escalations_total{outcome}`: requests this brain asked the national brain to
  place (from a submission or from the queue), by its answer: `placed`, `rejected`, or
  `unavailable` (it could not be asked);
- `cnbrain_site_capacity{site, resource}` and `cnbrain_site_free{site, resource}`: of the
  sites this brain owns, CPU cores, GiB of memory and each accelerator model (`resource` is
  `cpu_cores`, `memory_gib` or the model), as its ledger holds them when scraped;
  `cnbrain_link_utilisation{link}`: the share of each of its links' bandwidth reserved
  (`ledger.utilisation`, the figures of the REST API's capacity reads);
  `cnbrain_ledger_read` is 1 when the last reads of the database for a scrape answered, 0
  when it did not answer (the series read from it then keep their last values);
- every brain's (`federation.metrics`): the reservations its ledger holds, its ledger
  service's parts of cross-brain reservations and its ledger auditor's findings; and its
  gRPC server's (`rpc.metrics`), in a federation.

What is read from the database at a scrape (`ledger`, `read`; at most once per
`metrics_max_age_s`, `federation.scrape_reads`) keeps its last values while the database
does not answer.
"""

import time
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cnbrain import __version__
from cnbrain.domain.decision import Decision
from cnbrain.federation.metrics import AuditCollector, LedgerPartMetrics, ReservationCollector
from cnbrain.federation.ownership import Ownership
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.ledger.utilisation import link_uses, site_uses
from cnbrain.regional.decision_reasons import reason_of
from cnbrain.regional.queue_metrics import QueueCollector
from cnbrain.regional.use_cases.admit import RoundReport
from cnbrain.rpc.metrics import GrpcServerMetrics

DURATION_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
"""Seconds: a submission takes a few milliseconds, a cross-region one up to seconds."""

ROUND_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
"""Seconds: a round over a short queue takes milliseconds, over 10,000 requests seconds."""


class Metrics:
    """The metrics of one brain process (module docstring): `brain` names it (`regional`,
    `standalone`) and `region` its region."""

    def __init__(self, *, brain: str = "standalone", region: str | None = None) -> None:
        self.registry = CollectorRegistry()
        Gauge(
            "cnbrain_brain_info",
            "1: the brain (regional, standalone, national), its region and cnbrain's version.",
            ["brain", "region", "version"],
            registry=self.registry,
        ).labels(brain, region or "", __version__).set(1)
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
            "Submissions decided by this brain, by outcome (placed, queued, rejected, failed) "
            "and reason.",
            ["outcome", "reason"],
            registry=self.registry,
        )
        self.decision_seconds = Histogram(
            "cnbrain_decision_duration_seconds",
            "Time from a submission's intake to its decision, by outcome.",
            ["outcome"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self._decided: dict[tuple[str, str], Any] = {}
        self._decided_in: dict[str, Any] = {}
        self.admission_seconds = Histogram(
            "cnbrain_admission_round_duration_seconds",
            "Time of one round of the admission loop.",
            buckets=ROUND_BUCKETS,
            registry=self.registry,
        )
        admission = Counter(
            "cnbrain_admission_requests",
            "Queued requests the admission rounds admitted here (admitted), saw placed by the "
            "national brain (placed_elsewhere) or rejected (rejected).",
            ["outcome"],
            registry=self.registry,
        )
        self._admission = {
            outcome: admission.labels(outcome)
            for outcome in ("admitted", "placed_elsewhere", "rejected")
        }
        self.preemptions = Counter(
            "cnbrain_preemptions",
            "Running requests preempted (requeued) for a request of a higher class.",
            registry=self.registry,
        )
        escalations = Counter(
            "cnbrain_escalations",
            "Requests this brain asked the national brain to place, by its answer (placed, "
            "rejected, unavailable).",
            ["outcome"],
            registry=self.registry,
        )
        self._escalations = {
            outcome: escalations.labels(outcome)
            for outcome in ("placed", "rejected", "unavailable")
        }

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
            "1 when the last reads of a scrape found the database answering, 0 when not.",
            registry=self.registry,
        )
        self.queue = QueueCollector()
        self.registry.register(self.queue)
        self.reservations = ReservationCollector()
        self.registry.register(self.reservations)
        self.ledger_parts = LedgerPartMetrics(self.registry)
        self.audit = AuditCollector()
        self.registry.register(self.audit)
        self.grpc = GrpcServerMetrics(self.registry)

    async def read(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        """Read the queue and the reservations held from the database, for a scrape. Raises
        what the database raises."""
        await self.queue.read(sessions)
        await self.reservations.read(sessions)

    def decided(self, state: str, decision: Decision | None, seconds: float) -> None:
        """Count a submission decided in `seconds`: its state and its reason of `decision`."""
        key = (state, reason_of(state, decision))
        counter = self._decided.get(key)
        if counter is None:
            counter = self._decided[key] = self.decisions.labels(*key)
        counter.inc()
        histogram = self._decided_in.get(state)
        if histogram is None:
            histogram = self._decided_in[state] = self.decision_seconds.labels(state)
        histogram.observe(seconds)

    def admission_round(self, report: RoundReport, seconds: float) -> None:
        """Count one admission round that took `seconds` and did what `report` says."""
        self.admission_seconds.observe(seconds)
        for outcome, count in (
            ("admitted", report.admitted),
            ("placed_elsewhere", report.placed_elsewhere),
            ("rejected", report.rejected),
        ):
            if count:
                self._admission[outcome].inc(count)

    def preempted(self, count: int) -> None:
        self.preemptions.inc(count)

    def escalated(self, outcome: str) -> None:
        """Count an escalation answered `outcome` (`placed`, `rejected`, `unavailable`)."""
        self._escalations[outcome].inc()

    def ledger(self, snapshot: Snapshot, ownership: Ownership) -> None:
        """Set the capacity series from `snapshot`, for the sites and links of `ownership`
        (`ledger.utilisation`: the figures the REST API's capacity reads show)."""
        for site in site_uses(snapshot, owned=ownership.sites):
            capacity, free = site.capacity, site.free
            amounts = [
                ("cpu_cores", capacity.cpu_cores, free.cpu_cores),
                ("memory_gib", capacity.memory_gib, free.memory_gib),
                *((m, n, free.accelerators[m]) for m, n in capacity.accelerators.items()),
            ]
            for resource, held, left in amounts:
                self.site_capacity.labels(site=site.site.id, resource=resource).set(held)
                self.site_free.labels(site=site.site.id, resource=resource).set(left)
        for link in link_uses(snapshot, owned=ownership.links):
            if link.capacity_gbps:
                self.link_utilisation.labels(link=link.link.id).set(link.utilisation)

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
