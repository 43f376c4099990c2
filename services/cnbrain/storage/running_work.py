"""The work that holds this brain's capacity: every held reservation with its request, for
the admission round (each tenant's usage, and the candidates of preemption), and the same
usage summed per tenant for a few tenants (`held_usage`), for a placement that holds them to
their cohort quota. Both count the same thing: a tenant's held reservations in this brain's
ledger, each its compute (`demand_of`), and the cross-brain parts that count against the
tenant's quota here (`elsewhere_usage`: the source region's parts of its cross-region
requests, whose compute is held in another region). `held_work` also gives each
reservation's bandwidth (its Mbps on each of its links), which preemption frees for a
request its path blocks.
"""

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import HOLDING, ReservationState
from cnbrain.scheduling.resources import Resources
from cnbrain.storage.clock import as_utc
from cnbrain.storage.models import (
    PeerReservation,
    PlacementRequestRecord,
    ReservationLink,
    ReservationRecord,
)


@dataclass(frozen=True, slots=True)
class HeldWork:
    """Reservation `reservation_id` of request `request_id` (in `request_state`, its stored
    `body`) holds these amounts on `site_id`, and `mbps` on each link of `link_ids`, over
    [`start_at`, `end_at`)."""

    reservation_id: str
    request_id: str
    request_state: str
    body: dict[str, Any]
    tenant_id: str
    site_id: str
    cpu_m: int
    mem_mib: int
    storage_gib: int
    accelerator_model: str | None
    accelerator_milli: int
    start_at: datetime
    end_at: datetime
    mbps: int = 0
    link_ids: tuple[str, ...] = ()

    @property
    def bandwidth(self) -> Resources:
        """What it holds of its links, as a resource vector over link dimensions."""
        if not self.mbps:
            return Resources()
        return Resources.bandwidth(dict.fromkeys(self.link_ids, self.mbps))

    @property
    def demand(self) -> Resources:
        """What it holds of its site's compute, as a resource vector."""
        return demand_of(
            cpu_m=self.cpu_m,
            mem_mib=self.mem_mib,
            storage_gib=self.storage_gib,
            accelerator_model=self.accelerator_model,
            accelerator_milli=self.accelerator_milli,
        )


def demand_of(
    *,
    cpu_m: int,
    mem_mib: int,
    storage_gib: int,
    accelerator_model: str | None,
    accelerator_milli: int,
) -> Resources:
    """A reservation's (or claim's) compute as a resource vector in the ledger's units."""
    accelerators = (
        {accelerator_model: accelerator_milli} if accelerator_model and accelerator_milli else None
    )
    return Resources.of(
        cpu_m=cpu_m, mem_mib=mem_mib, storage_gib=storage_gib, accelerators=accelerators
    )


async def held_work(session: AsyncSession) -> list[HeldWork]:
    """Every held reservation of this brain with its request and its links, oldest first
    (two queries)."""
    r, q, rl = ReservationRecord, PlacementRequestRecord, ReservationLink
    links: dict[str, list[str]] = {}
    for reservation_id, link_id in await session.execute(
        select(rl.reservation_id, rl.link_id)
        .join(r, r.id == rl.reservation_id)
        .where(r.state == ReservationState.HELD)
        .order_by(rl.reservation_id, rl.link_id)
    ):
        links.setdefault(reservation_id, []).append(link_id)
    rows = await session.execute(
        select(
            r.id,
            r.request_id,
            q.state,
            q.body,
            r.tenant_id,
            r.site_id,
            r.cpu_m,
            r.mem_mib,
            r.storage_gib,
            r.accelerator_model,
            r.accelerator_milli,
            r.start_at,
            r.end_at,
            r.mbps,
        )
        .join(q, q.id == r.request_id)
        .where(r.state == ReservationState.HELD)
        .order_by(r.start_at, r.id)
    )
    return [
        HeldWork(
            reservation_id=row[0],
            request_id=row[1],
            request_state=row[2],
            body=dict(row[3]),
            tenant_id=row[4],
            site_id=row[5],
            cpu_m=int(row[6]),
            mem_mib=int(row[7]),
            storage_gib=int(row[8]),
            accelerator_model=row[9],
            accelerator_milli=int(row[10]),
            start_at=as_utc(row[11]),
            end_at=as_utc(row[12]),
            mbps=int(row[13] or 0),
            link_ids=tuple(links.get(row[0], ())),
        )
        for row in rows
    ]


async def held_usage(
    session: AsyncSession, tenant_ids: Collection[str], *, excluding: Collection[str] = ()
) -> dict[str, Resources]:
    """What each of `tenant_ids` holds, summed: its held reservations (what `held_work`'s
    work of the tenant adds up to) and the cross-brain parts that count against its quota
    here (`elsewhere_usage`), leaving out the reservations and parts `excluding` names; a
    tenant that holds nothing is absent. Two queries; nothing is read for no tenants."""
    if not tenant_ids:
        return {}
    r = ReservationRecord
    query = (
        select(
            r.tenant_id,
            r.accelerator_model,
            func.sum(r.cpu_m),
            func.sum(r.mem_mib),
            func.sum(r.storage_gib),
            func.sum(r.accelerator_milli),
        )
        .where(r.state == ReservationState.HELD, r.tenant_id.in_(sorted(tenant_ids)))
        .group_by(r.tenant_id, r.accelerator_model)
    )
    if excluding:
        query = query.where(r.id.not_in(sorted(excluding)))
    usage = _summed(await session.execute(query))
    for tenant, held in (
        await elsewhere_usage(session, tenant_ids=tenant_ids, excluding=excluding)
    ).items():
        usage[tenant] = usage.get(tenant, Resources()) + held
    return usage


async def elsewhere_usage(
    session: AsyncSession,
    *,
    tenant_ids: Collection[str] | None = None,
    excluding: Collection[str] = (),
) -> dict[str, Resources]:
    """What the cross-brain parts that count against their tenant's quota in this brain hold
    (prepared or held; the source region's parts of cross-region requests, whose compute
    runs in another region), summed per tenant, of `tenant_ids` only when given, leaving out
    the parts `excluding` names. One query."""
    p = PeerReservation
    query = (
        select(
            p.tenant_id,
            p.accelerator_model,
            func.sum(p.cpu_m),
            func.sum(p.mem_mib),
            func.sum(p.storage_gib),
            func.sum(p.accelerator_milli),
        )
        .where(p.state.in_(sorted(HOLDING)), p.counts_quota.is_(True))
        .group_by(p.tenant_id, p.accelerator_model)
    )
    if tenant_ids is not None:
        if not tenant_ids:
            return {}
        query = query.where(p.tenant_id.in_(sorted(tenant_ids)))
    if excluding:
        query = query.where(p.id.not_in(sorted(excluding)))
    return _summed(await session.execute(query))


def _summed(rows: Any) -> dict[str, Resources]:
    """Rows of (tenant, accelerator model, cpu_m, mem_mib, storage_gib, accelerators) summed
    per tenant."""
    usage: dict[str, Resources] = {}
    for tenant, model, cpu_m, mem_mib, storage_gib, count in rows:
        held = demand_of(
            cpu_m=int(cpu_m),
            mem_mib=int(mem_mib),
            storage_gib=int(storage_gib),
            accelerator_model=model,
            accelerator_milli=int(count),
        )
        usage[tenant] = usage.get(tenant, Resources()) + held
    return usage
