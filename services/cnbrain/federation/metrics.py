"""Prometheus metrics every brain has, regional or national, besides its gRPC server's
(`cnbrain.rpc.metrics`):

- `cnbrain_reservations{kind, state}`: what the brain's ledger holds, read from its
  database when scraped (`ReservationCollector`): its own reservations (`kind="local"`,
  `state="held"`) and its parts of cross-brain reservations (`kind="part"`, `state`
  `prepared` or `held`); every pair present, 0 when none;
- `cnbrain_ledger_parts_total{step, outcome}`: the parts of cross-brain reservations this
  brain's LedgerService took from the national brain, by `step` (`prepare`, `commit`,
  `release`) and `outcome` (`ok`; `refused`, with a reason, such as no room or a part it
  does not own; for a release, `not_held`: an id it held no part of, or had released
  already, as when a release is made again); every pair there from the start, at 0;
- the ledger auditor's (`AuditCollector`), read from the auditor when scraped:
  `cnbrain_ledger_audits_total`, `cnbrain_ledger_audit_findings_total{kind}` and
  `cnbrain_ledger_audit_repairs_total{kind}` (since the brain started),
  `cnbrain_ledger_audit_last_findings{kind}` (of the last audit) and
  `cnbrain_ledger_audit_last_timestamp_seconds` (when it ran; 0 before the first). `kind`
  is a kind of finding (`cnbrain.ledger.audit.Kind`), every one present from the start.
"""

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.states import ReservationState
from cnbrain.federation.auditor import LedgerAuditor
from cnbrain.ledger.audit import Kind
from cnbrain.storage import reservation_stats

STEPS = ("prepare", "commit", "release")

OPEN: tuple[tuple[str, str], ...] = (
    (reservation_stats.LOCAL, ReservationState.HELD),
    (reservation_stats.PART, ReservationState.PREPARED),
    (reservation_stats.PART, ReservationState.HELD),
)
"""The (kind, state) pairs of `cnbrain_reservations`."""


class ReservationCollector(Collector):
    """`cnbrain_reservations` (module docstring) as of the last `read`."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}

    async def read(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        """Count what the ledger holds. Raises what the database raises; the last read then
        stands."""
        async with sessions() as session, session.begin():
            self._counts = await reservation_stats.open_reservations(session)

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "cnbrain_reservations",
            "Reservations this brain's ledger holds: its own (local) and its parts of "
            "cross-brain ones (part), by state.",
            labels=["kind", "state"],
        )
        for kind, state in OPEN:
            family.add_metric([kind, state], self._counts.get((kind, state), 0))
        yield family


class LedgerPartMetrics:
    """`cnbrain_ledger_parts_total` (module docstring), with its series looked up once."""

    def __init__(self, registry: CollectorRegistry) -> None:
        parts = Counter(
            "cnbrain_ledger_parts",
            "Parts of cross-brain reservations this brain's ledger service took, by step "
            "(prepare, commit, release) and outcome (ok, refused; not_held for a release of "
            "a part it did not hold).",
            ["step", "outcome"],
            registry=registry,
        )
        self._ok = {step: parts.labels(step, "ok") for step in STEPS}
        self._refused = {step: parts.labels(step, "refused") for step in ("prepare", "commit")}
        self._not_held = parts.labels("release", "not_held")

    def count(self, step: str, reasons: Sequence[str | None]) -> None:
        """Count the parts of one `step` call (`prepare` or `commit`): None for a part
        taken, a reason for one refused."""
        refused = sum(1 for reason in reasons if reason is not None)
        if refused:
            self._refused[step].inc(refused)
        if len(reasons) > refused:
            self._ok[step].inc(len(reasons) - refused)

    def released(self, released: Sequence[bool]) -> None:
        """Count the parts of one release call: True for a part it released, False for an
        id it did not hold (`not_held`)."""
        done = sum(released)
        if done:
            self._ok["release"].inc(done)
        if len(released) > done:
            self._not_held.inc(len(released) - done)


class AuditCollector(Collector):
    """The ledger auditor's series (module docstring), read at each scrape from the auditor
    `watch` gave (none yet: every series 0)."""

    def __init__(self) -> None:
        self._auditor: LedgerAuditor | None = None

    def watch(self, auditor: LedgerAuditor) -> None:
        self._auditor = auditor

    def collect(self) -> Iterator[Metric]:
        auditor = self._auditor
        audits = CounterMetricFamily(
            "cnbrain_ledger_audits", "Audits of this brain's ledger since it started."
        )
        audits.add_metric([], auditor.audits if auditor else 0)
        yield audits
        last = auditor.last if auditor else None
        found = CounterMetricFamily(
            "cnbrain_ledger_audit_findings",
            "Findings of the ledger auditor since the brain started, by kind.",
            labels=["kind"],
        )
        repaired = CounterMetricFamily(
            "cnbrain_ledger_audit_repairs",
            "What the ledger auditor released since the brain started, by kind of finding.",
            labels=["kind"],
        )
        latest = GaugeMetricFamily(
            "cnbrain_ledger_audit_last_findings",
            "Findings of the last audit of this brain's ledger, by kind.",
            labels=["kind"],
        )
        for kind in Kind:
            found.add_metric([kind], auditor.found_total[kind] if auditor else 0)
            repaired.add_metric([kind], auditor.repaired_total[kind] if auditor else 0)
            latest.add_metric([kind], last.found.get(kind, 0) if last else 0)
        yield from (found, repaired, latest)
        at = GaugeMetricFamily(
            "cnbrain_ledger_audit_last_timestamp_seconds",
            "When the last audit of this brain's ledger ran (Unix time; 0: none yet).",
        )
        at.add_metric([], last.at_s if last else 0)
        yield at
