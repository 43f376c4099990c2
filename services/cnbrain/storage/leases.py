"""Leases on the duties that one instance of a brain does at a time (its admission loop).

An instance holds a duty's lease until a time; it renews it before then, and another
instance takes it only once it has lapsed. Holding is one conditional statement, so two
instances never both hold one lease at the same instant of the database's order.
"""

from datetime import datetime
from typing import cast

from sqlalchemy import Table, or_, update
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.storage.clock import as_utc
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.models import LeaseRecord

_LEASES = cast("Table", LeaseRecord.__table__)


async def hold(
    session: AsyncSession, *, name: str, owner: str, until: datetime, now: datetime
) -> bool:
    """Take or renew the lease `name` for `owner` until `until`, in the caller's
    transaction: True when `owner` holds it now (it held it already, or the lease was free or
    lapsed before `now`), False when another owner holds it."""
    until, now = as_utc(until), as_utc(now)
    c = _LEASES.c
    await session.execute(
        insert_on_conflict(session, _LEASES)
        .values(name=name, owner=owner, until=until)
        .on_conflict_do_nothing(index_elements=[c.name])
    )
    held = await session.execute(
        update(_LEASES)
        .where(c.name == name, or_(c.owner == owner, c.until < now))
        .values(owner=owner, until=until)
        .returning(c.name)
    )
    return held.first() is not None


async def let_go(session: AsyncSession, *, name: str, owner: str, now: datetime) -> None:
    """End `owner`'s lease `name` at `now`, so another instance may take it at once (nothing
    when another owner holds it)."""
    c = _LEASES.c
    await session.execute(
        update(_LEASES).where(c.name == name, c.owner == owner).values(until=as_utc(now))
    )
