"""The national brain's Prometheus metrics, read at `GET /metrics` of its HTTP listener
(`national.http_app`). One registry per brain process (per replica); no label names a tenant
or a request.

- `cnbrain_brain_info{brain="national", region="", version}`: 1;
- `cnbrain_two_phase_parts_total{step, outcome}`: the parts of cross-region reservations the
  coordinator (`national.coordinator`) took through each step, in every owner (the regions'
  ledgers and its own): `step` is `prepare`, `commit`, `abort` (the release of a placement
  that failed or that a stopped replica left undecided) or `release` (of a placement that
  ended, or a release owed made again); `outcome` is `ok`, `refused` (the owner gave a
  reason: no room, a quota) or `unavailable` (the owner did not answer, or is not
  registered); every pair is there from the start, at 0;
- `cnbrain_two_phase_releases_owed`: releases owners could not make when asked, owed by
  this replica until they answer;
- `cnbrain_cross_region_placements_total{outcome}`: placements asked of the national brain
  (`PlaceCrossRegion`; a waiting request asked again counts again), by the answer: `placed`
  or `rejected`;
- `cnbrain_forwarded_calls_total{operation, outcome}`: tenants' calls forwarded from one
  region to another (`national.forwarding`), by `operation` (`submit`, `quote`, `get`,
  `events`, `cancel`, `list`, `usage`, `usage_report`) and `outcome` (the answer's status
  class `2xx`, `4xx`, `5xx`; or `invalid`, `not_found`, `unavailable`, `error`);
- `cnbrain_regions_known`, `cnbrain_regions_up` and `cnbrain_region_up{region}`: the
  regions registered, and those whose summary arrived within `REGION_UP_INTERVALS`
  summary intervals (`summary_interval_ms`), read from the directory when scraped;
  `cnbrain_region_summary_age_seconds{region}`: the age of each one's latest summary;
- every brain's (`federation.metrics`: reservations held, ledger-service parts, the ledger
  auditor) and its gRPC server's (`rpc.metrics`).
"""

import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain import __version__
from cnbrain.federation.auditor import LedgerAuditor
from cnbrain.federation.metrics import AuditCollector, LedgerPartMetrics, ReservationCollector
from cnbrain.national.coordinator import Coordinator
from cnbrain.national.regions import RegionDirectory
from cnbrain.rpc.metrics import GrpcServerMetrics
from cnbrain.v1 import common_pb2

REGION_UP_INTERVALS: Final = 3
"""A region is up while its latest summary is at most this many summary intervals old."""

OPERATION_PREFIX: Final = "FORWARDED_OPERATION_"

TWO_PHASE_STEPS: Final = ("prepare", "commit", "abort", "release")
TWO_PHASE_OUTCOMES: Final = ("ok", "refused", "unavailable")
"""Every pair of a step and an outcome has its `cnbrain_two_phase_parts_total` series from
the start, at 0: the first parts counted after a start then move a series Prometheus has
seen before, so that `increase()` over it (the alert on failing commits) sees them."""


def operation_name(operation: int) -> str:
    """The label of a forwarded call's operation: its enum name in lower case without the
    prefix (`submit`, ...), `other` for a value the enum has not."""
    try:
        name = common_pb2.ForwardedOperation.Name(operation)  # type: ignore[arg-type]
    except ValueError:
        return "other"
    return name.removeprefix(OPERATION_PREFIX).lower()


class RegionCollector(Collector):
    """The regions' series (module docstring), read from the directory `watch` gave when
    scraped (none yet: no region)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._directory: RegionDirectory | None = None
        self._up_within_s = 0.0

    def watch(self, directory: RegionDirectory, *, up_within_s: float) -> None:
        self._directory = directory
        self._up_within_s = up_within_s

    def collect(self) -> Iterator[Metric]:
        regions = self._directory.all() if self._directory is not None else []
        now = self._clock()
        known = GaugeMetricFamily("cnbrain_regions_known", "Regions registered.")
        up = GaugeMetricFamily(
            "cnbrain_regions_up", "Regions registered whose summaries arrive in time."
        )
        each = GaugeMetricFamily(
            "cnbrain_region_up",
            "1 while a region's summaries arrive in time, 0 otherwise.",
            labels=["region"],
        )
        age = GaugeMetricFamily(
            "cnbrain_region_summary_age_seconds",
            "Age of a region's latest summary.",
            labels=["region"],
        )
        alive = 0
        for region in sorted(regions, key=lambda r: r.id):
            fresh = region.summary is not None and now - region.summary_at <= self._up_within_s
            alive += fresh
            each.add_metric([region.id], 1 if fresh else 0)
            if region.summary is not None:
                age.add_metric([region.id], max(now - region.summary_at, 0.0))
        known.add_metric([], len(regions))
        up.add_metric([], alive)
        yield from (known, up, each, age)


class OwedCollector(Collector):
    """`cnbrain_two_phase_releases_owed`, read from the coordinator `watch` gave."""

    def __init__(self) -> None:
        self._coordinator: Coordinator | None = None

    def watch(self, coordinator: Coordinator) -> None:
        self._coordinator = coordinator

    def collect(self) -> Iterator[Metric]:
        owed = GaugeMetricFamily(
            "cnbrain_two_phase_releases_owed",
            "Releases of cross-region parts owners could not make when asked, owed until "
            "they answer.",
        )
        owed.add_metric([], self._coordinator.owed if self._coordinator is not None else 0)
        yield owed


class NationalMetrics:
    """The metrics of one national brain process (module docstring). Its parts count into
    it as they run (`two_phase`, `placed`, `forwarded`); `watch` gives it what it reads
    when scraped."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        Gauge(
            "cnbrain_brain_info",
            "1: the brain (regional, standalone, national), its region and cnbrain's version.",
            ["brain", "region", "version"],
            registry=self.registry,
        ).labels("national", "", __version__).set(1)
        self.two_phase_parts = Counter(
            "cnbrain_two_phase_parts",
            "Parts of cross-region reservations taken through a step of the two-phase "
            "commit (prepare, commit, abort, release), by outcome (ok, refused, unavailable).",
            ["step", "outcome"],
            registry=self.registry,
        )
        self._parts: dict[tuple[str, str], Any] = {
            (step, outcome): self.two_phase_parts.labels(step, outcome)
            for step in TWO_PHASE_STEPS
            for outcome in TWO_PHASE_OUTCOMES
        }
        self._owed = OwedCollector()
        self.registry.register(self._owed)
        placements = Counter(
            "cnbrain_cross_region_placements",
            "Placements asked of the national brain, by answer (placed, rejected).",
            ["outcome"],
            registry=self.registry,
        )
        self._placements = {
            outcome: placements.labels(outcome) for outcome in ("placed", "rejected")
        }
        self.forwarded_calls = Counter(
            "cnbrain_forwarded_calls",
            "Tenants' calls forwarded from one region to another, by operation and outcome.",
            ["operation", "outcome"],
            registry=self.registry,
        )
        self._forwarded: dict[tuple[int, str], Any] = {}
        self._regions = RegionCollector()
        self.registry.register(self._regions)
        self.reservations = ReservationCollector()
        self.registry.register(self.reservations)
        self.ledger_parts = LedgerPartMetrics(self.registry)
        self._audit = AuditCollector()
        self.registry.register(self._audit)
        self.grpc = GrpcServerMetrics(self.registry)

    def watch(
        self,
        *,
        directory: RegionDirectory,
        coordinator: Coordinator,
        auditor: LedgerAuditor,
        summary_interval_s: float,
    ) -> None:
        """Read these at every scrape: the regions, the releases owed, the auditor."""
        self._regions.watch(directory, up_within_s=REGION_UP_INTERVALS * summary_interval_s)
        self._owed.watch(coordinator)
        self._audit.watch(auditor)

    def two_phase(self, step: str, outcome: str, parts: int) -> None:
        """Count `parts` taken through `step` with `outcome` (`coordinator.Count`): one of
        `TWO_PHASE_STEPS` and one of `TWO_PHASE_OUTCOMES`, else KeyError."""
        self._parts[(step, outcome)].inc(parts)

    def placed(self, outcome: str) -> None:
        """Count a placement answered `outcome` (`placed`, `rejected`)."""
        self._placements[outcome].inc()

    def forwarded(self, operation: int, outcome: str) -> None:
        """Count a forwarded call (`forwarding.Counted`)."""
        counter = self._forwarded.get((operation, outcome))
        if counter is None:
            counter = self.forwarded_calls.labels(operation_name(operation), outcome)
            self._forwarded[(operation, outcome)] = counter
        counter.inc()

    async def read(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        """Read what a scrape needs of the database (the reservations held). Raises what
        the database raises; the last read then stands."""
        await self.reservations.read(sessions)

    def exposition(self) -> bytes:
        """Every metric in the text exposition format."""
        return generate_latest(self.registry)
