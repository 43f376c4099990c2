"""The work that holds this brain's capacity: every held reservation with its request, for
the admission round (each tenant's usage, and the candidates of preemption)."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import ReservationState
from cnbrain.storage.clock import as_utc
from cnbrain.storage.models import PlacementRequestRecord, ReservationRecord


@dataclass(frozen=True, slots=True)
class HeldWork:
    """Reservation `reservation_id` of request `request_id` (in `request_state`, its stored
    `body`) holds these amounts on `site_id` over [`start_at`, `end_at`)."""

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
    accelerator_count: int
    start_at: datetime
    end_at: datetime


async def held_work(session: AsyncSession) -> list[HeldWork]:
    """Every held reservation of this brain with its request, oldest first (one query)."""
    r, q = ReservationRecord, PlacementRequestRecord
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
            r.accelerator_count,
            r.start_at,
            r.end_at,
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
            accelerator_count=int(row[10]),
            start_at=as_utc(row[11]),
            end_at=as_utc(row[12]),
        )
        for row in rows
    ]
