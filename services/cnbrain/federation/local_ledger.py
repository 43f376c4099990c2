"""A brain's own ledger of its parts of cross-brain reservations, over its database: the
snapshot bracket of a local change of capacity (`local_change`), and the parts prepared,
committed and released in one transaction per call. Prepared parts that are not committed in
time are released by `expire_forever`."""

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.dataplane.steering import SteeringError
from cnbrain.domain.decision import STEERING_REASON, Decision
from cnbrain.federation.steered_paths import Steered
from cnbrain.ledger.claim import Claim, FlowHold, reservation_of
from cnbrain.ledger.reservation import Reservation
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import peer_ledger
from cnbrain.storage.clock import utcnow

log = logging.getLogger("cnbrain.federation")


class CapacityWatch(Protocol):
    """How a brain keeps its cached snapshot current around its own ledger changes."""

    def begin_local_change(self) -> None: ...

    def end_local_change(self, reservation: Reservation | None) -> None: ...

    def capacity_changed(self) -> None: ...


@dataclass(slots=True, eq=False)
class LocalChange:
    """What one change of a brain's own ledger did: the reservations it took, and whether it
    freed capacity (released or moved a reservation)."""

    taken: list[Reservation] = field(default_factory=list)
    freed: bool = False

    def took(self, reservation: Reservation) -> None:
        self.taken.append(reservation)

    def free(self) -> None:
        self.freed = True

    @property
    def changed(self) -> bool:
        return self.freed or bool(self.taken)


@asynccontextmanager
async def local_change(watch: CapacityWatch) -> AsyncIterator[LocalChange]:
    """Bracket a change of the brain's own ledger for its cached snapshot. Reads that overlap
    the block are not cached. When the block ends normally, the cached snapshot takes what it
    `took`, or is forgotten when it freed capacity; when it raises, the cached snapshot is
    forgotten (the change may or may not have been committed)."""
    change = LocalChange()
    watch.begin_local_change()
    try:
        yield change
    except BaseException:
        watch.end_local_change(None)
        watch.capacity_changed()
        raise
    if change.freed or not change.taken:
        watch.end_local_change(None)
        if change.freed:
            watch.capacity_changed()
        return
    for reservation in change.taken:
        watch.end_local_change(reservation)


async def prepare_parts(
    sessions: async_sessionmaker[AsyncSession],
    claims: Sequence[Claim],
    *,
    ttl_ms: int,
    arrays: MapArrays,
    watch: CapacityWatch,
    take: peer_ledger.Take | None = None,
    flows: Sequence[FlowHold] = (),
) -> list[str | None]:
    """Prepare every claim, with the flows of `flows` that are its (by reservation id), in
    one transaction (each on its own, see `peer_ledger.prepare_many`, which takes their
    amounts and flows with `take` when given); for each, None (prepared, now or before) or
    why not. The cached snapshot takes what was taken, or is forgotten when a part prepared
    holds flows (it cannot follow their windows). Should the transaction fail in the
    database (say, a deadlock with a concurrent one), every claim is tried again in a
    transaction of its own. Raises LedgerStoreError for a flow of no claim of `claims`."""
    how = {} if take is None else {"take": take}
    if not claims:
        return []
    expires_at = utcnow() + timedelta(milliseconds=ttl_ms)
    flows_of: dict[str, list[FlowHold]] = {}
    for flow in flows:
        flows_of.setdefault(flow.reservation_id, []).append(flow)
    async with local_change(watch) as change:
        try:
            async with sessions.begin() as session:
                outcomes = await peer_ledger.prepare_many(
                    session, claims=claims, expires_at=expires_at, flows=flows, **how
                )
        except DBAPIError:
            if len(claims) == 1:
                raise
            log.warning("preparing %d parts together failed; one at a time", len(claims))
            outcomes = []
            for claim in claims:
                async with sessions.begin() as session:
                    outcomes.extend(
                        await peer_ledger.prepare_many(
                            session,
                            claims=[claim],
                            expires_at=expires_at,
                            flows=flows_of.get(claim.reservation_id, ()),
                            **how,
                        )
                    )
        for claim, outcome in zip(claims, outcomes, strict=True):
            if outcome is True:
                change.took(reservation_of(claim, arrays=arrays))
                if claim.reservation_id in flows_of:
                    change.free()
    return [outcome if isinstance(outcome, str) else None for outcome in outcomes]


async def commit_parts(
    sessions: async_sessionmaker[AsyncSession],
    entries: Sequence[tuple[str, dict[str, Any] | None, dict[str, Any] | None]],
    *,
    steered: Steered | None = None,
) -> list[str | None]:
    """Commit every (reservation id, decision, request) in one transaction; for each, None
    (held) or why it cannot be committed. With `steered`, each decision's segments of this
    brain are installed first (`steered_parts`): one that cannot be is not committed (its
    reason says why), and those not committed are released from the data plane again."""
    if not entries:
        return []
    if steered is None:
        async with sessions.begin() as session:
            return await peer_ledger.commit_many(session, entries=entries)
    return await steered_parts(sessions, entries, steered)


async def steered_parts(
    sessions: async_sessionmaker[AsyncSession],
    entries: Sequence[tuple[str, dict[str, Any] | None, dict[str, Any] | None]],
    steered: Steered,
) -> list[str | None]:
    """`commit_parts` with steering: each entry's decision installed on its own (an entry
    whose steering fails is not committed: its reason is `steering: ` and
    `domain.decision.STEERING_REASON`, the details logged), then the others
    committed in one transaction; what was installed for an entry not committed (or for all,
    when the transaction fails) is released again."""
    reasons: list[str | None] = [None] * len(entries)
    installed: list[str] = []
    for i, (reservation_id, document, _) in enumerate(entries):
        if document is None:
            continue
        try:
            await steered.install([Decision.model_validate(document)])
        except (SteeringError, ValidationError) as error:
            log.warning("part %s not committed: %s", reservation_id, error)
            reasons[i] = f"steering: {STEERING_REASON}"
            continue
        installed.append(reservation_id)
    committing = [entry for entry, reason in zip(entries, reasons, strict=True) if reason is None]
    try:
        async with sessions.begin() as session:
            outcomes = iter(await peer_ledger.commit_many(session, entries=committing))
    except BaseException:
        await steered.release(installed)
        raise
    results = [next(outcomes) if reason is None else reason for reason in reasons]
    refused = {entry[0] for entry, result in zip(entries, results, strict=True) if result}
    await steered.release([rid for rid in installed if rid in refused])
    return results


async def release_parts(
    sessions: async_sessionmaker[AsyncSession],
    reservation_ids: Sequence[str],
    *,
    watch: CapacityWatch,
    keep_delivery: bool = False,
    steered: Steered | None = None,
) -> list[bool]:
    """Release every reservation id in one transaction, its flows included (but their
    deliveries with `keep_delivery`, see `peer_ledger.release_many`); for each, whether this
    call did. The cached snapshot is bracketed as for a prepare, and forgotten when anything
    was released. With `steered`, what it installed for them is removed first (what cannot be
    removed now, `steered` removes later)."""
    if not reservation_ids:
        return []
    if steered is not None:
        await steered.release(reservation_ids)
    async with local_change(watch) as change:
        async with sessions.begin() as session:
            released = await peer_ledger.release_many(
                session, reservation_ids=reservation_ids, keep_delivery=keep_delivery
            )
        if any(released):
            change.free()
    return released


async def expire_forever(
    sessions: async_sessionmaker[AsyncSession],
    *,
    changed: Callable[[], None],
    interval_s: float = 1.0,
) -> None:
    """Release lapsed prepared parts every `interval_s`, until cancelled."""
    while True:
        try:
            async with sessions.begin() as session:
                lapsed = await peer_ledger.expire(session)
            if lapsed:
                log.warning(
                    "released %d prepared reservations that were never committed: %s",
                    len(lapsed),
                    ", ".join(lapsed),
                )
                changed()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("expiring prepared reservations failed; trying again")
        await asyncio.sleep(interval_s)
