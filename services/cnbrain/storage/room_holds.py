"""Room holds (`models.RoomHoldRecord`): compute on a site of this brain that preemption
freed for a request of another region's queue, left to that request for a short while.

Contract: a hold counts while its `until` is after now, in every read here (`active`,
`active_on`); one that has lapsed counts for nothing, whether or not it was deleted yet
(`hold` deletes them lazily). `end` deletes the holds of requests that take compute here
(`ledger_store` calls it in the transaction that takes it). Nothing here commits.
"""

from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import Select, Table, delete, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.ledger.held_room import HeldRoom
from cnbrain.ledger.reservation import ComputeClaim
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage.clock import as_utc
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.models import RoomHoldRecord

_HOLDS = cast("Table", RoomHoldRecord.__table__)


@dataclass(frozen=True, slots=True)
class RoomHold:
    """The compute left to request `request_id` on `site_id` until `until` (ledger units)."""

    request_id: str
    site_id: str
    cpu_m: int
    mem_mib: int
    storage_gib: int
    accelerator_model: str | None
    accelerator_milli: int
    until: datetime


async def hold(session: AsyncSession, one: RoomHold, *, now: datetime) -> None:
    """Store `one` (replacing an earlier hold of its request), in the caller's transaction,
    and forget the holds that lapsed before `now`."""
    await session.execute(delete(_HOLDS).where(_HOLDS.c.until < as_utc(now)))
    values = {**asdict(one), "until": as_utc(one.until)}
    await session.execute(
        insert_on_conflict(session, _HOLDS)
        .values(**values)
        .on_conflict_do_update(
            index_elements=[_HOLDS.c.request_id],
            set_={k: v for k, v in values.items() if k != "request_id"},
        )
    )


async def active(session: AsyncSession, *, now: datetime) -> list[RoomHold]:
    """The holds that last beyond `now`, oldest request id first."""
    return await _read(session, _select(now))


async def active_on(
    session: AsyncSession,
    *,
    site_ids: Collection[str],
    request_ids: Collection[str],
    now: datetime,
) -> list[RoomHold]:
    """The holds that last beyond `now` on a site of `site_ids` or for a request of
    `request_ids`, oldest request id first."""
    r = RoomHoldRecord
    query = _select(now).where(
        or_(r.site_id.in_(sorted(site_ids)), r.request_id.in_(sorted(request_ids)))
    )
    return await _read(session, query)


async def end(session: AsyncSession, request_ids: Collection[str]) -> None:
    """Delete the holds of `request_ids` (their rows locked in request id order first, the
    order every such delete takes), in the caller's transaction."""
    if not request_ids:
        return
    c = _HOLDS.c
    locked = (
        select(c.request_id)
        .where(c.request_id.in_(sorted(request_ids)))
        .order_by(c.request_id)
        .with_for_update()
    )
    await session.execute(delete(_HOLDS).where(c.request_id.in_(locked)))


def held_rooms(holds: Sequence[RoomHold], arrays: MapArrays) -> list[HeldRoom]:
    """`holds` as a snapshot of `arrays` counts them (`ledger.held_room`): a hold on a site
    not on the map is left out, and its accelerators when their model is not."""
    found = []
    index, columns = arrays.map.site_index, arrays.accelerator_column
    for one in holds:
        site = index.get(one.site_id)
        if site is None:
            continue
        column = columns.get(one.accelerator_model or "", -1)
        compute = ComputeClaim(
            site=site,
            cpu_m=one.cpu_m,
            mem_mib=one.mem_mib,
            storage_gib=one.storage_gib,
            acc_column=column,
            acc_milli=one.accelerator_milli if column >= 0 else 0,
        )
        found.append(HeldRoom(one.request_id, compute, one.until.timestamp()))
    return found


_Rows = Select[str, str, int, int, int, str | None, int, datetime]
"""The columns of `RoomHold`, in its order."""


def _select(now: datetime) -> _Rows:
    """The columns of `RoomHold`, of the holds that last beyond `now`, by request id."""
    r = RoomHoldRecord
    return (
        select(
            r.request_id,
            r.site_id,
            r.cpu_m,
            r.mem_mib,
            r.storage_gib,
            r.accelerator_model,
            r.accelerator_milli,
            r.until,
        )
        .where(r.until > as_utc(now))
        .order_by(r.request_id)
    )


async def _read(session: AsyncSession, query: _Rows) -> list[RoomHold]:
    return [
        RoomHold(request_id, site_id, cpu_m, mem_mib, storage_gib, model, count, as_utc(until))
        for request_id, site_id, cpu_m, mem_mib, storage_gib, model, count, until in (
            await session.execute(query)
        )
    ]
