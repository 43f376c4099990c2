"""A held part of a cross-brain reservation moved onto a new route of its owner's segments
(`federation.segment_rerouting`): the part's bandwidth taken on its new links, under the
part, then given back on the links it leaves, and the part's decision replaced. Its compute,
window, quota and every other link stay as they are, so no other owner's part changes.

Each step locks the part's row first and checks that the part is still held on the links
the caller read (PartChanged otherwise: it was released, or moved by another), so the
ledger's link rows always hold exactly what the parts' links say (`ledger_store`'s
invariants).

Nothing here commits: the caller owns the transaction and rolls back after an exception.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import ReservationState
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import Claim
from cnbrain.storage import ledger_store
from cnbrain.storage.clock import epoch_s, utcnow
from cnbrain.storage.errors import LedgerStoreError
from cnbrain.storage.ledger_sql import Sums, give_back, link_rows
from cnbrain.storage.models import PeerReservation, PeerReservationLink


class PartChanged(LedgerStoreError):  # noqa: N818 (as CapacityConflict)
    """The part is not held any more, or its links are not the ones read before."""


@dataclass(frozen=True, slots=True)
class HeldPart:
    """A held part of a cross-brain reservation: its ids, the bandwidth it holds on each of
    its links (`link_ids`, sorted) over `window`, whether it holds flows of its own, and its
    decision as it stores it now."""

    reservation_id: str
    request_id: str
    tenant_id: str
    mbps: int
    window: Window
    link_ids: tuple[str, ...]
    has_flows: bool
    decision: dict[str, Any]


async def held_part(session: AsyncSession, *, reservation_id: str) -> HeldPart | None:
    """Part `reservation_id` while it is held and committed with a decision (None
    otherwise)."""
    part = await session.get(PeerReservation, reservation_id, populate_existing=True)
    if part is None or part.state != ReservationState.HELD or part.decision is None:
        return None
    flows = await ledger_store.flows_of(
        session, reservation_ids=[reservation_id], now=epoch_s(utcnow())
    )
    return HeldPart(
        reservation_id=part.id,
        request_id=part.request_id,
        tenant_id=part.tenant_id,
        mbps=part.mbps,
        window=Window(epoch_s(part.start_at), epoch_s(part.end_at)),
        link_ids=tuple(await _links(session, reservation_id)),
        has_flows=bool(flows.get(reservation_id)),
        decision=part.decision,
    )


async def take_links(session: AsyncSession, *, part: HeldPart, added: Sequence[str]) -> None:
    """Take `part`'s bandwidth on every link of `added` (none of its links yet) over its
    window, with the ledger's checks (`ledger_store.take_many`: the links' free bandwidth
    now and over time), and count them among its links. Raises PartChanged when the part is
    not held on `part.link_ids` any more, CapacityConflict when a link is short, and
    LedgerStoreError for a link it holds already."""
    await _locked(session, part.reservation_id, part.link_ids)
    if set(added) & set(part.link_ids):
        raise LedgerStoreError(f"part {part.reservation_id!r} holds a link of {sorted(added)}")
    if not added or not part.mbps:
        return
    claim = Claim(
        reservation_id=part.reservation_id,
        request_id=part.request_id,
        tenant_id=part.tenant_id,
        site_id=None,
        cpu_m=0,
        mem_mib=0,
        storage_gib=0,
        accelerator_model=None,
        accelerator_milli=0,
        link_ids=tuple(sorted(added)),
        mbps=part.mbps,
        window=part.window,
        counts_quota=False,
    )
    await ledger_store.take_many(session, claims=[claim])
    await session.execute(insert(PeerReservationLink), link_rows([claim]))


async def drop_links(
    session: AsyncSession,
    *,
    part: HeldPart,
    link_ids: Sequence[str],
    dropped: Sequence[str],
    decision: dict[str, Any] | None,
) -> None:
    """Give back `part`'s bandwidth on every link of `dropped`, which stop being its links,
    and, unless None, store `decision` as its decision. Raises PartChanged when the part is
    not held on exactly `link_ids` (its links once `take_links` added its new ones), and
    LedgerStoreError for a link of `dropped` that is not among them."""
    await _locked(session, part.reservation_id, link_ids)
    stray = sorted(set(dropped) - set(link_ids))
    if stray:
        raise LedgerStoreError(f"part {part.reservation_id!r} does not hold link {stray[0]!r}")
    if dropped:
        if part.mbps:
            await give_back(
                session,
                Sums(sites={}, pools={}, bandwidth=dict.fromkeys(dropped, part.mbps), quotas={}),
            )
        await session.execute(
            delete(PeerReservationLink).where(
                PeerReservationLink.reservation_id == part.reservation_id,
                PeerReservationLink.link_id.in_(sorted(dropped)),
            )
        )
    if decision is not None:
        row = await session.get(PeerReservation, part.reservation_id)
        assert row is not None  # locked by `_locked`
        row.decision = decision
        await session.flush()


async def _locked(session: AsyncSession, reservation_id: str, link_ids: Sequence[str]) -> None:
    """Lock part `reservation_id`'s row; PartChanged unless it is held on exactly
    `link_ids`."""
    state = await session.scalar(
        select(PeerReservation.state)
        .where(PeerReservation.id == reservation_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if state != ReservationState.HELD:
        raise PartChanged(f"part {reservation_id!r} is not held ({state or 'unknown'})")
    held = await _links(session, reservation_id)
    if sorted(held) != sorted(link_ids):
        raise PartChanged(f"part {reservation_id!r} holds other links than those read")


async def _links(session: AsyncSession, reservation_id: str) -> list[str]:
    rows = await session.scalars(
        select(PeerReservationLink.link_id)
        .where(PeerReservationLink.reservation_id == reservation_id)
        .order_by(PeerReservationLink.link_id)
    )
    return list(rows)
