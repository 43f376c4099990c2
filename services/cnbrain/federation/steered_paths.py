"""A brain's steered paths: what it installed in the data plane for the reservations it holds,
kept in step with its ledger.

The ledgers call `install` when they commit (before the transaction: a reservation whose
steering fails is not committed, and one whose transaction fails has its steering released
again) and `release` when they release. `follow_forever` is the safety net and the watch:
every interval it installs what the ledger holds and is not steered (after a restart, say),
releases what is steered and no longer held (a release made on another path, such as a job's
end), and hands the held reservations with a link of this brain's segments down to
`reroute`.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.dataplane.steering import Steering, SteeringError, steering_of
from cnbrain.domain.decision import Decision
from cnbrain.federation.settings import BrainSettings
from cnbrain.storage import steered

log = logging.getLogger("cnbrain.dataplane")

SETTLE_S = 10.0
"""How long a reservation installed at a commit is left alone by `follow` while the
ledger's transaction may not show it yet."""

Reroute = Callable[[Decision, set[str]], Awaitable[None]]
"""Re-routes a held reservation off its links (ids) that are down."""


class Steered(Protocol):
    """The steering the ledgers call (None where a brain steers nothing)."""

    async def install(self, decisions: Sequence[Decision]) -> None:
        """Install this brain's segments of every decision: all or, raising SteeringError,
        none."""

    async def release(self, reservation_ids: Sequence[str]) -> None:
        """Remove what is installed for those reservations (none: nothing). Never raises:
        what cannot be removed now is removed again later."""


class SteeredPaths:
    """`Steered` through `steering`; `sessions` reach the brain's ledger for `follow`."""

    def __init__(
        self,
        steering: Steering,
        *,
        sessions: async_sessionmaker[AsyncSession],
        reroute: Reroute | None = None,
        interval_s: float = 1.0,
    ) -> None:
        self._steering = steering
        self._sessions = sessions
        self.reroute = reroute
        """Where `follow` hands the reservations with a link down (None: nowhere)."""
        self._interval_s = interval_s
        self._installed: dict[str, tuple[Decision, float]] = {}
        """Each reservation installed: its decision and when (monotonic seconds)."""
        self._refused: set[str] = set()
        """The held reservations `follow` could not install (not tried again while held)."""

    @property
    def owner(self) -> str | None:
        return self._steering.owner

    def close(self) -> None:
        self._steering.close()

    async def links_down(self, link_ids: Iterable[str]) -> set[str]:
        """Those of `link_ids` the data plane has down."""
        return await self._steering.links_down(link_ids)

    def steered(self) -> dict[str, Decision]:
        """The decisions installed, by reservation id."""
        return {rid: decision for rid, (decision, _) in self._installed.items()}

    async def install(self, decisions: Sequence[Decision]) -> None:
        await self._steering.install(decisions)
        now = time.monotonic()
        for decision in decisions:
            if decision.reservation_id is not None:
                self._installed[decision.reservation_id] = (decision, now)

    async def release(self, reservation_ids: Sequence[str]) -> None:
        known = [self._installed[rid][0] for rid in reservation_ids if rid in self._installed]
        unknown = [rid for rid in reservation_ids if rid not in self._installed]
        known += await self._decisions_of_parts(unknown)
        if not known:
            return
        try:
            await self._steering.remove(known)
        except SteeringError as error:
            log.warning("%s; removing it again at the next follow", error)
            now = time.monotonic() - SETTLE_S
            for decision in known:
                self._installed[str(decision.reservation_id)] = (decision, now)
            return
        for decision in known:
            self._installed.pop(str(decision.reservation_id), None)

    async def _decisions_of_parts(self, reservation_ids: Sequence[str]) -> list[Decision]:
        """The decisions committed with this brain's parts of those reservations (a part
        installed before a restart of this brain)."""
        found = []
        async with self._sessions() as session:
            for rid in reservation_ids:
                document = await steered.decision_of_part(session, rid)
                if document is not None:
                    found.append(Decision.model_validate(document))
        return found

    async def follow_forever(self) -> None:
        """`follow` every interval, until cancelled."""
        while True:
            try:
                await self.follow()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("following the ledger in the data plane failed; trying again")
            await asyncio.sleep(self._interval_s)

    async def follow(self) -> None:
        """Install what the ledger holds and is not installed, release what is installed and
        no longer held (once it has settled), and re-route the held reservations with a link
        of this brain's segments down."""
        async with self._sessions() as session:
            documents = await steered.held_decisions(session)
        held: dict[str, Decision] = {}
        for document in documents:
            try:
                decision = Decision.model_validate(document)
            except ValidationError:
                continue
            if decision.reservation_id is not None and decision.path is not None:
                held[decision.reservation_id] = decision
        settled = time.monotonic() - SETTLE_S
        stale = [
            rid for rid, (_, at) in self._installed.items() if rid not in held and at < settled
        ]
        if stale:
            await self.release(stale)
        self._refused &= set(held)
        for rid, decision in held.items():
            if rid not in self._installed and rid not in self._refused:
                try:
                    await self.install([decision])
                except SteeringError as error:
                    self._refused.add(rid)
                    log.warning("%s", error)
        if self.reroute is not None:
            await self._reroute_down(list(held.values()))

    async def _reroute_down(self, held: Sequence[Decision]) -> None:
        mine = {
            decision.reservation_id: {
                hop.link
                for segment in (decision.path.segments if decision.path else ())
                if self.owner is None or segment.owner == self.owner
                for hop in segment.hops
            }
            for decision in held
        }
        links = set().union(*mine.values()) if mine else set()
        if not links or self.reroute is None:
            return
        down = await self._steering.links_down(links)
        if not down:
            return
        for decision in held:
            cut = mine[decision.reservation_id] & down
            if cut:
                await self.reroute(decision, down)


def steered_paths(
    settings: BrainSettings,
    *,
    sessions: async_sessionmaker[AsyncSession],
    owner: str | None,
    reroute: Reroute | None = None,
) -> SteeredPaths | None:
    """The steered paths of brain `owner` (None: a standalone brain, every segment its own)
    as its settings ask (`steering`, `netlab`, `resteer_interval_s`); None when it steers
    nothing."""
    steering = steering_of(settings.steering, lab=settings.netlab, owner=owner)
    if steering is None:
        return None
    return SteeredPaths(
        steering, sessions=sessions, reroute=reroute, interval_s=settings.resteer_interval_s
    )
