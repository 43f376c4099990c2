"""Operators' reports of the state of links: the last report of each link, down or up, with
its reason, who made it and when. A link whose last report says down is down for the
brain's re-routing (`federation.link_states`), whatever the data plane says of it, and offers
nothing to new reservations (`ledger_store`: the snapshot, the calendar and every take).

Nothing here commits: the caller owns the transaction (and its audit entry)."""

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.bounds import MAX_LINK_REASON
from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import insert_on_conflict
from cnbrain.storage.models import LinkStateRecord

DOWN = "down"
UP = "up"
STATES = (DOWN, UP)

MAX_ACTOR = 64
"""Characters of a report's actor."""

CHUNK = 500
"""Link ids per statement."""


@dataclass(frozen=True, slots=True)
class LinkReport:
    """The last report of link `link`: `state` (`DOWN` or `UP`), why, who, and when."""

    link: str
    state: str
    reason: str
    actor: str
    at: datetime


async def report(
    session: AsyncSession, *, link_id: str, state: str, reason: str, actor: str
) -> LinkReport:
    """Keep this report as the last of link `link_id` (a link of the registry: the caller
    checked it), replacing the one before; the report kept. ValueError for a state that is
    not `DOWN` or `UP`, a reason longer than `MAX_LINK_REASON` or an actor longer than
    `MAX_ACTOR` (the caller's bounds)."""
    if state not in STATES:
        raise ValueError(f"state must be {DOWN!r} or {UP!r}, not {state!r}")
    if len(reason) > MAX_LINK_REASON or len(actor) > MAX_ACTOR:
        raise ValueError(f"a reason of at most {MAX_LINK_REASON}, an actor of at most {MAX_ACTOR}")
    now = utcnow()
    row = {"state": state, "reason": reason, "actor": actor, "reported_at": now}
    statement = insert_on_conflict(session, LinkStateRecord).values(link_id=link_id, **row)
    await session.execute(
        statement.on_conflict_do_update(index_elements=[LinkStateRecord.link_id], set_=row)
    )
    return LinkReport(link=link_id, state=state, reason=reason, actor=actor, at=now)


async def down_links(session: AsyncSession, link_ids: Collection[str] | None = None) -> set[str]:
    """Those of `link_ids` (None: of every link) whose last report says down."""
    if link_ids is None:
        return set(
            await session.scalars(
                select(LinkStateRecord.link_id).where(LinkStateRecord.state == DOWN)
            )
        )
    ids = sorted(set(link_ids))
    found: set[str] = set()
    for start in range(0, len(ids), CHUNK):
        found.update(
            await session.scalars(
                select(LinkStateRecord.link_id).where(
                    LinkStateRecord.link_id.in_(ids[start : start + CHUNK]),
                    LinkStateRecord.state == DOWN,
                )
            )
        )
    return found
