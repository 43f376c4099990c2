"""The ledger auditor of one brain: one audit of its own ledger, its repairs and its report.

An audit reads the ledger in one consistent view (`storage.ledger_audit.read`), asks the
source region of every held part of another region's request whether that request is live
there (`LiveAt`, grouped by region; a region that does not answer leaves its parts
unverified), finds what is wrong (`cnbrain.ledger.audit`), releases what is provably
orphaned after the grace (`ledger_audit.release`, one transaction, an audit-log entry each;
what a completed request holds keeps its deliveries)
and keeps the report of the audit (`last`) and the counts of every audit since the start
(`found_total`, `repaired_total`). Over-commit and mismatched `used` columns are only
reported.
"""

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.errors import Invalid, Unavailable
from cnbrain.domain.states import RequestState, ReservationState
from cnbrain.federation.live_map import LiveMap
from cnbrain.ledger.audit import (
    Finding,
    Kind,
    Liveness,
    Part,
    Report,
    Suspicions,
    holding_findings,
    report,
    usage_findings,
)
from cnbrain.storage import ledger_audit
from cnbrain.storage.clock import as_utc

log = logging.getLogger("cnbrain.audit")

LiveAt = Callable[[str, Sequence[str]], Awaitable[Liveness]]
"""The live and the completed ones of some request ids at their source region (region id,
request ids); raises Unavailable when the region cannot be asked."""

LOCAL = ""
"""The source of a part whose request is recorded in this brain (a region id otherwise)."""

ASK_BATCH = ledger_audit.MAX_IDS
"""Request ids asked of a source region in one call."""


class LedgerAuditor:
    """Audits the ledger of the brain of `region`, whose requests are recorded in its database
    (None: the national brain or a standalone one; every part is then of a request of another
    region). `region_of`
    names the region of a province (None: not on the map); `live_at` asks other regions
    (None: none can be asked, their parts stay unverified). `changed` is called after a
    repair released something."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        region: str | None,
        region_of: Callable[[str], str | None],
        live_at: LiveAt | None,
        grace_s: float,
        changed: Callable[[], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sessions = sessions
        self._region = region
        self._region_of = region_of
        self._live_at = live_at
        self._grace_s = grace_s
        self._changed = changed
        self._clock = clock
        self._suspicions = Suspicions()
        self.last: Report | None = None
        self.found_total: Counter[str] = Counter()
        self.repaired_total: Counter[str] = Counter()
        self.audits = 0

    async def audit(self) -> Report:
        """One audit (see the module's docstring); its report."""
        async with self._sessions.begin() as session:
            rows = await ledger_audit.read(session)
            parts = [self._part(row) for row in rows.parts]
            local = sorted({p.request_id for p in parts if p.source == LOCAL})
            live: dict[str, bool | None] = {}
            completed: set[str] = set()
            for start in range(0, len(local), ASK_BATCH):
                batch = local[start : start + ASK_BATCH]
                here = await ledger_audit.live_requests(session, request_ids=batch)
                live.update({rid: rid in here.live for rid in batch})
                completed |= here.completed
        await self._ask_sources(parts, live, completed)
        now = self._clock()
        findings = [
            *usage_findings(rows.usages),
            *holding_findings(reservations=rows.reservations, parts=parts, live=live, now_s=now),
        ]
        due = self._suspicions.lasting(findings, now_s=now, grace_s=self._grace_s)
        repairs = await self._repair(
            due,
            {row.id: row.tenant_id for row in rows.parts},
            keep_deliveries={
                *(r.id for r in rows.reservations if r.request_state == RequestState.COMPLETED),
                *(
                    p.id
                    for p in parts
                    if p.state == ReservationState.HELD and p.request_id in completed
                ),
            },
        )
        repaired = {f.key for f in repairs}
        self._suspicions.update([f for f in findings if f.key not in repaired], now)
        audit_report = report(now, findings, repairs)
        self._keep(audit_report)
        return audit_report

    def _part(self, row: ledger_audit.PartRow) -> Part:
        """The pure part of `row`: its source is LOCAL for a request of this brain."""
        source: str | None = None
        if row.source_province is not None:
            region = self._region_of(row.source_province)
            if region is not None:
                source = LOCAL if region == self._region else region
        return Part(
            id=row.id,
            request_id=row.request_id,
            state=row.state,
            created_at_s=as_utc(row.created_at).timestamp(),
            expires_at_s=(
                as_utc(row.expires_at).timestamp() if row.expires_at is not None else None
            ),
            source=source,
        )

    async def _ask_sources(
        self, parts: Sequence[Part], live: dict[str, bool | None], completed: set[str]
    ) -> None:
        """Put in `live` whether the request of every held part of another region is live at
        its source (None: not known), and in `completed` those that completed there."""
        by_region: dict[str, list[str]] = {}
        for p in parts:
            if p.state == ReservationState.HELD and p.source not in (None, LOCAL):
                assert p.source is not None
                by_region.setdefault(p.source, []).append(p.request_id)
        for region, ids in sorted(by_region.items()):
            unique = sorted(set(ids))
            for start in range(0, len(unique), ASK_BATCH):
                batch = unique[start : start + ASK_BATCH]
                if self._live_at is None:
                    live.update(dict.fromkeys(batch))
                    continue
                try:
                    found = await self._live_at(region, batch)
                except Unavailable as why:
                    log.warning("ledger audit: region %s cannot be asked: %s", region, why)
                    live.update(dict.fromkeys(batch))
                    continue
                live.update({rid: rid in found.live for rid in batch})
                completed.update(rid for rid in batch if rid in found.completed)

    async def _repair(
        self, due: Sequence[Finding], tenants: dict[str, str], *, keep_deliveries: set[str]
    ) -> list[Finding]:
        """Release what `due` is about, in one transaction (`keep_deliveries`: the held
        reservations and parts whose request completed); the findings repaired."""
        if not due:
            return []
        reservations = {f.object_id: f.detail for f in due if f.kind is Kind.ENDED_REQUEST}
        parts = {f.object_id: f.detail for f in due if f.kind is not Kind.ENDED_REQUEST}
        async with self._sessions.begin() as session:
            released_reservations, released_parts = await ledger_audit.release(
                session,
                reservations=reservations,
                parts=parts,
                tenants=tenants,
                keep_deliveries=keep_deliveries,
            )
        released = {*released_reservations, *released_parts}
        if released:
            self._changed()
        done = [f for f in due if f.object_id in released]
        for f in done:
            log.warning("ledger audit released %s (%s: %s)", f.object_id, f.kind, f.detail)
        return done

    def _keep(self, audit_report: Report) -> None:
        self.last = audit_report
        self.audits += 1
        self.found_total.update(audit_report.found)
        self.repaired_total.update(audit_report.repaired)
        if audit_report.found:
            log.warning(
                "ledger audit found %s; repaired %s",
                dict(sorted(audit_report.found.items())),
                dict(sorted(audit_report.repaired.items())),
            )


def region_of_province(live_map: LiveMap) -> Callable[[str], str | None]:
    """The region of a province on `live_map`'s current map (None: not on it)."""

    def region_of(province: str) -> str | None:
        found = live_map.map.provinces.get(province)
        return found.region if found is not None else None

    return region_of


def live_requests(
    sessions: async_sessionmaker[AsyncSession],
) -> Callable[[Sequence[str]], Awaitable[Liveness]]:
    """The live and the completed ones of some request ids in this brain's database (at most
    `ledger_audit.MAX_IDS`; Invalid for more): what its GetLiveRequests answers."""

    async def live(request_ids: Sequence[str]) -> Liveness:
        if len(request_ids) > ledger_audit.MAX_IDS:
            raise Invalid(
                f"at most {ledger_audit.MAX_IDS} request ids, not {len(request_ids)}",
                field="request_ids",
            )
        async with sessions.begin() as session:
            return await ledger_audit.live_requests(session, request_ids=request_ids)

    return live
