"""The regions the national brain knows (`models.KnownRegionRecord`): each region's endpoint
and provinces as it last registered."""

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.storage.clock import utcnow
from cnbrain.storage.models import KnownRegionRecord

MAX_ENDPOINT = 255
"""Characters of an endpoint kept (the column's length)."""


@dataclass(frozen=True, slots=True)
class KnownRegion:
    region_id: str
    endpoint: str
    provinces: frozenset[str]


async def save(session: AsyncSession, region: KnownRegion) -> None:
    """Record `region` (replacing what was recorded of it), in the caller's transaction."""
    record = await session.get(KnownRegionRecord, region.region_id)
    if record is None:
        record = KnownRegionRecord(region_id=region.region_id)
        session.add(record)
    record.endpoint = region.endpoint
    record.provinces = sorted(region.provinces)
    record.registered_at = utcnow()
    await session.flush()


async def all_known(session: AsyncSession) -> list[KnownRegion]:
    """Every region recorded, by id."""
    records = await session.scalars(select(KnownRegionRecord).order_by(KnownRegionRecord.region_id))
    return [
        KnownRegion(record.region_id, record.endpoint, frozenset(record.provinces))
        for record in records
    ]
