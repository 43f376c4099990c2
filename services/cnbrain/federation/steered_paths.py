"""A brain's steered paths: what it installed in the data plane for the reservations it holds,
kept in step with its ledger.

Installed at commit, synchronously (before the transaction: a reservation whose steering
fails is not committed, and one whose transaction fails has its steering released again):
the parts of the two-phase commit (`local_ledger.commit_parts`), a regional brain's own
placements (`Placer`) and admissions (`AdmitQueued`), and a re-routed reservation's new path
(`regional.rerouting`). Released synchronously: a cancel, the parts released through the
two-phase commit, and a re-routed reservation's old path. `follow_forever` steers everything
else and is the safety net: every interval it

- takes the whole data plane for lost when it was made again (or is gone), and steers it all
  again;
- installs what the ledger holds and is not steered (after a restart, or a failed install,
  tried again at growing intervals), leaving alone for SETTLE_S a reservation this object
  has just released (a cancel that the ledger read in the same pass did not show yet);
- releases what is steered and no longer held (a job's end, a preemption, the auditor), once
  SETTLE_S have passed since it was installed, and what a release could not remove;
- has `reroute` tell again what it could not tell other brains before;
- hands the held reservations with a link of this brain's segments down (by `links`: the
  data plane's state and the operators' reports, `federation.link_states`) to `reroute`;
- installs again the steered reservations none of whose links is down and a headend of
  which is gone from the data plane (the kernel drops a route whose link goes down, and does
  not put it back when the link comes up).

A brain without a data plane (`steering = off`) has steered paths too, over `NoDataPlane`:
nothing is installed, its ledgers do not call them at commit and release (`steers`), and
following the ledger, only while a link is reported down, serves the re-routing off it.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.dataplane.steering import NoDataPlane, Steering, SteeringError, steering_of
from cnbrain.domain.decision import Decision
from cnbrain.federation.link_states import AnyDown, LinkStates, ReportedLinks
from cnbrain.federation.settings import BrainSettings
from cnbrain.storage import steered

log = logging.getLogger("cnbrain.dataplane")

SETTLE_S = 10.0
"""How long a reservation installed at a commit is left alone by `follow` while the
ledger's transaction may not show it yet, and one just released is not installed again."""

MAX_BACKOFF_INTERVALS = 30
"""A held reservation whose install failed is tried again after 2, 4, 8, ... intervals, at
most this many."""


class Reroute(Protocol):
    """Re-routes held reservations off their links that are down."""

    async def __call__(self, decision: Decision, down: set[str]) -> None:
        """Re-route `decision`'s reservation off its links `down` (ids), or tell why not."""

    def keep(self, reservation_ids: set[str]) -> None:
        """Forget what it told of every reservation but these (held, with a link down)."""

    async def retell(self) -> None:
        """Tell again what could not be told before (other brains' outages)."""


class Steered(Protocol):
    """The steering the ledgers call (None where a brain steers nothing)."""

    async def install(self, decisions: Sequence[Decision]) -> None:
        """Install this brain's segments of every decision: all or, raising SteeringError,
        none."""

    async def release(self, reservation_ids: Sequence[str]) -> None:
        """Remove what is installed for those reservations (none: nothing). Never raises:
        what cannot be removed now is logged, and removed by `follow` later."""


class SteeredPaths:
    """`Steered` through `steering`; `sessions` reach the brain's ledger for `follow`;
    `links` says which links are down (None: those the data plane has down); `active`, when
    given, says whether `follow` has anything to follow (over `NoDataPlane`: whether a link
    is reported down), and a pass does no more than `retell` while it answers False."""

    def __init__(
        self,
        steering: Steering,
        *,
        sessions: async_sessionmaker[AsyncSession],
        reroute: Reroute | None = None,
        interval_s: float = 1.0,
        links: LinkStates | None = None,
        active: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self._steering = steering
        self._active = active
        self._links: LinkStates = steering if links is None else links
        self._sessions = sessions
        self.reroute = reroute
        """Where `follow` hands the reservations with a link down (None: nowhere)."""
        self._interval_s = interval_s
        self._installed: dict[str, tuple[Decision, float]] = {}
        """Each reservation installed: its decision and when (monotonic seconds)."""
        self._retry: dict[str, tuple[int, float]] = {}
        """The held reservations whose install failed: how many times, and when `follow`
        tries again (monotonic seconds)."""
        self._unsteerable: set[str] = set()
        """The held reservations without a decision with a path naming them."""
        self._released: dict[str, float] = {}
        """The reservations released lately, and when (monotonic seconds)."""
        self._owed: set[str] = set()
        """The reservations whose release failed before it could remove anything."""
        self._generation: str | None = None
        """The data plane's generation at the last `follow` (None: not there, or no
        `follow` yet)."""
        self._told_gone = False

    @property
    def owner(self) -> str | None:
        return self._steering.owner

    @property
    def steers(self) -> bool:
        """Whether there is a data plane to steer onto: False over `NoDataPlane`, whose
        ledgers need not call `install` and `release` at their commits and releases."""
        return not isinstance(self._steering, NoDataPlane)

    def close(self) -> None:
        self._steering.close()

    async def links_down(self, link_ids: Iterable[str]) -> set[str]:
        """Those of `link_ids` that are down (by `links`)."""
        return await self._links.links_down(link_ids)

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
        now = time.monotonic()
        for rid in reservation_ids:
            self._released[rid] = now
        try:
            await self._release(reservation_ids)
        except Exception:
            log.exception(
                "removing the steering of %d reservations failed; the ledger's follower "
                "removes it later",
                len(reservation_ids),
            )
            self._owed.update(reservation_ids)

    async def _release(self, reservation_ids: Sequence[str]) -> None:
        known = [self._installed[rid][0] for rid in reservation_ids if rid in self._installed]
        unknown = [rid for rid in reservation_ids if rid not in self._installed]
        if unknown:
            async with self._sessions() as session:
                documents = await steered.decisions_of(session, unknown)
            known += [Decision.model_validate(d) for d in documents.values()]
        self._owed.difference_update(reservation_ids)
        if not known:
            return
        try:
            await self._steering.remove(known)
        except SteeringError as error:
            log.warning("%s; removing it again at the next follow", error)
            then = time.monotonic() - SETTLE_S
            for decision in known:
                self._installed[str(decision.reservation_id)] = (decision, then)
            return
        for decision in known:
            self._installed.pop(str(decision.reservation_id), None)

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
        """One pass of following the ledger (module docstring)."""
        if self.reroute is not None:
            await self.reroute.retell()
        if self._active is not None and not await self._active():
            if self.reroute is not None:
                self.reroute.keep(set())  # no link down: every failure is told anew
            return
        if not await self._same_data_plane():
            return
        now = time.monotonic()
        self._released = {r: at for r, at in self._released.items() if at > now - SETTLE_S}
        async with self._sessions() as session:
            held = await steered.held_reservations(session)
        settled = now - SETTLE_S
        gone = [r for r, (_, at) in self._installed.items() if r not in held and at < settled]
        owed = sorted(self._owed - held)
        self._owed &= held
        if gone or owed:
            await self.release(gone + owed)
        self._retry = {r: due for r, due in self._retry.items() if r in held}
        self._unsteerable &= held
        await self._install_new(held)
        cut: set[str] = set()
        if self.reroute is not None:
            cut = await self._reroute_down(held)
        steered_held = [
            decision
            for rid, (decision, _) in list(self._installed.items())
            if rid in held and rid not in cut and rid not in self._released
        ]
        if steered_held:
            for decision in await self._steering.missing(steered_held):
                log.info(
                    "reservation %s: a headend of it is gone from the data plane; installing "
                    "it again",
                    decision.reservation_id,
                )
                await self._try_install(decision)

    async def _same_data_plane(self) -> bool:
        """Whether the data plane is there; when it was made again or is gone, everything
        this object held installed is forgotten (to be installed again)."""
        generation = await self._steering.generation()
        if generation != self._generation:
            if self._generation is not None:
                log.warning("the data plane was made again or is gone: steering all again")
                self._installed.clear()
                self._retry.clear()
            self._generation = generation
        if generation is None:
            if not self._told_gone:
                log.warning("the data plane is not there: nothing is steered until it is")
                self._told_gone = True
            return False
        self._told_gone = False
        return True

    async def _install_new(self, held: set[str]) -> None:
        now = time.monotonic()
        new = [
            rid
            for rid in held
            if rid not in self._installed
            and rid not in self._released
            and rid not in self._unsteerable
            and self._retry.get(rid, (0, now))[1] <= now
        ]
        if not new:
            return
        async with self._sessions() as session:
            documents = await steered.decisions_of(session, new)
        for rid in sorted(new):
            try:
                decision = Decision.model_validate(documents[rid])
            except (KeyError, ValidationError):
                decision = None
            if decision is None or decision.path is None:
                self._unsteerable.add(rid)
            elif rid not in self._released:
                await self._try_install(decision)

    async def _try_install(self, decision: Decision) -> None:
        """Install `decision`; when that fails, say why and try again later (`_retry`)."""
        rid = str(decision.reservation_id)
        failures, due = self._retry.get(rid, (0, 0.0))
        if due > time.monotonic():
            return
        try:
            await self.install([decision])
        except SteeringError as error:
            failures += 1
            wait_s = self._interval_s * min(2**failures, MAX_BACKOFF_INTERVALS)
            self._retry[rid] = (failures, time.monotonic() + wait_s)
            log.warning("%s; trying again in %.1f s", error, wait_s)
            return
        self._retry.pop(rid, None)

    async def _reroute_down(self, held: set[str]) -> set[str]:
        """Hand every held, steered reservation with a link of this brain's segments down to
        `reroute`; their ids."""
        decisions = [d for rid, (d, _) in self._installed.items() if rid in held]
        mine = {
            str(decision.reservation_id): {
                hop.link
                for segment in (decision.path.segments if decision.path else ())
                if self.owner is None or segment.owner == self.owner
                for hop in segment.hops
            }
            for decision in decisions
        }
        links = set().union(*mine.values()) if mine else set()
        down = await self._links.links_down(links) if links else set()
        cut = {rid for rid, own in mine.items() if own & down}
        assert self.reroute is not None
        self.reroute.keep(cut)
        for decision in decisions:
            if str(decision.reservation_id) in cut:
                try:
                    await self.reroute(decision, down)
                except Exception:
                    log.exception("re-routing reservation %s failed", decision.reservation_id)
        return cut


def steered_paths(
    settings: BrainSettings,
    *,
    sessions: async_sessionmaker[AsyncSession],
    owner: str | None,
    reroute: Reroute | None = None,
) -> SteeredPaths:
    """The steered paths of brain `owner` (None: a standalone brain, every segment its own)
    as its settings ask (`steering`, `netlab`, `resteer_interval_s`); with `steering = off`,
    over `NoDataPlane` (`steers` is False), for re-routing only, following the ledger only
    while a link is reported down. A link is down for it when the data plane has it down or
    its operator's last report in the brain's database says so."""
    steering = steering_of(settings.steering, lab=settings.netlab, owner=owner)
    reported = ReportedLinks(sessions)
    return SteeredPaths(
        steering,
        sessions=sessions,
        reroute=reroute,
        interval_s=settings.resteer_interval_s,
        links=AnyDown(steering, reported),
        active=reported.any_down if isinstance(steering, NoDataPlane) else None,
    )
