"""Crowding a registered site: its usage reported so that only some of its CPU stays free."""

from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.storage import registry
from cnbrain.storage.models import SiteCapacity


async def leave_cpu_free(session: AsyncSession, site_id: str, cpu_m: int) -> None:
    """Report `site_id` as using all its CPU but `cpu_m` millicores, and nothing else."""
    row = await session.get(SiteCapacity, site_id)
    assert row is not None
    await registry.report_site_usage(
        session,
        site_id=site_id,
        cpu_m=row.cpu_m_cap - cpu_m,
        mem_mib=0,
        storage_gib=0,
        accelerators={},
    )
