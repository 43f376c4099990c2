"""The regions the national brain knows (`models.KnownRegionRecord`): each region's endpoint
and provinces as it last registered."""

from dataclasses import dataclass
from typing import cast

from sqlalchemy import Table, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.models import KnownRegionRecord

_KNOWN = cast("Table", KnownRegionRecord.__table__)

MAX_ENDPOINT = 255
"""Characters of an endpoint kept (the column's length)."""


@dataclass(frozen=True, slots=True)
class KnownRegion:
    region_id: str
    endpoint: str
    provinces: frozenset[str]


async def save(session: AsyncSession, region: KnownRegion) -> None:
    """Record `region` (replacing what was recorded of it), in the caller's transaction; two
    registrations of one region at once both succeed, the later one kept."""
    values = {
        "endpoint": region.endpoint,
        "provinces": sorted(region.provinces),
        "registered_at": utcnow(),
    }
    await session.execute(
        insert_on_conflict(session, _KNOWN)
        .values(region_id=region.region_id, **values)
        .on_conflict_do_update(index_elements=[_KNOWN.c.region_id], set_=values)
    )


async def all_known(session: AsyncSession) -> list[KnownRegion]:
    """Every region recorded, by id."""
    records = await session.scalars(select(KnownRegionRecord).order_by(KnownRegionRecord.region_id))
    return [
        KnownRegion(record.region_id, record.endpoint, frozenset(record.provinces))
        for record in records
    ]


async def known(session: AsyncSession, region_id: str) -> bool:
    """Whether region `region_id` has ever registered."""
    return await session.get(KnownRegionRecord, region_id) is not None
