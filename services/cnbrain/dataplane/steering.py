"""Steering: a brain installs its own segments of the paths it reserves in the data plane,
and removes them when the reservation is released.

`Steering` is the port the brain's steered paths call (`federation.steered_paths`);
`NetlabSteering` its adapter onto a netlab: for every segment of a decision the brain owns, a
headend at the segment's first node (`plan.headends`); `NoDataPlane` the one of a brain that
steers nothing. Everything is keyed by the decision's reservation id: installing twice is
installing once, removing what is not installed does nothing, and a reservation of the same
request installed later takes the job's traffic over (the swap of a re-routed path) without
the earlier one's removal undoing it.
"""

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

from cnbrain.dataplane import linux, manifest
from cnbrain.dataplane.plan import Headend, LabPlan, PlanError, headends
from cnbrain.domain.decision import Decision
from cnbrain.domain.errors import Unavailable

log = logging.getLogger("cnbrain.dataplane")

T = TypeVar("T")


class SteeringError(Unavailable):
    """A reservation could not be steered; the message names it and says why (the data
    plane's details: for the brain's log, not for a tenant)."""


class Steering(Protocol):
    """One brain's steering of its segments."""

    @property
    def owner(self) -> str | None:
        """The brain whose segments it steers: a region id, `national`, or None (a
        standalone brain: every segment)."""

    async def install(self, decisions: Sequence[Decision]) -> None:
        """Install this brain's segments of every decision: all of them or, raising
        SteeringError (naming the reservation and why), none: what it installed is removed,
        and what this steering had installed before at the same places is put back."""

    async def remove(self, decisions: Sequence[Decision]) -> None:
        """Remove what this brain installed for every decision's reservation (nothing
        installed: nothing done). SteeringError when a step fails."""

    async def missing(self, decisions: Sequence[Decision]) -> list[Decision]:
        """Those of `decisions` (installed before) with a headend whose route is no longer
        theirs: the kernel drops a route whose link went down, and does not put it back."""

    async def links_down(self, link_ids: Iterable[str]) -> set[str]:
        """Those of `link_ids` the data plane has down (none while it is not there)."""

    async def generation(self) -> str | None:
        """An id of the data plane as it is now, None while it is not there. It changes
        whenever the data plane is made again, which loses everything installed."""

    def close(self) -> None:
        """Let go of what it holds open."""


class NetlabSteering:
    """`Steering` onto the netlab `lab` (its plan read from its manifest, in `directory`) for
    the segments of `owner` (None: all). Its netlink and manifest work runs in one thread of
    its own; the plan is read again only when the manifest was written again (its
    generation), which also lets go of the sockets of the lab as it was. `close` lets its
    netlink sockets go.

    What it put back when an install fails is the headend this object had installed last at
    the same router for the same job; one that another process (or this brain before a
    restart) installed is not known to it, and is put back by the brain's steered paths
    when they find its route gone."""

    def __init__(
        self, *, lab: str, owner: str | None, directory: Path = manifest.DIRECTORY
    ) -> None:
        self._lab = lab
        self._owner = owner
        self._directory = directory
        self._headends = linux.Headends()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"netlab-{lab}")
        """The one thread that does its netlink and manifest work (a netlink socket stays
        with its thread); every attribute below is that thread's."""
        self._seen: str | None = None
        """The generation of the manifest last seen."""
        self._plan: tuple[str, LabPlan] | None = None
        """The plan read last, with its manifest's generation."""
        self._current: dict[tuple[str, str], Headend] = {}
        """The headend this object installed last at each (namespace, job), and has not
        removed."""
        self._told_not_up = False

    @property
    def owner(self) -> str | None:
        return self._owner

    def close(self) -> None:
        self._thread.submit(self._headends.close).result()
        self._thread.shutdown()

    async def install(self, decisions: Sequence[Decision]) -> None:
        await self._in_thread(self._install_all, list(decisions))

    async def remove(self, decisions: Sequence[Decision]) -> None:
        await self._in_thread(self._remove_all, list(decisions))

    async def missing(self, decisions: Sequence[Decision]) -> list[Decision]:
        return await self._in_thread(self._missing, list(decisions))

    async def links_down(self, link_ids: Iterable[str]) -> set[str]:
        return await self._in_thread(self._links_down, list(link_ids))

    async def generation(self) -> str | None:
        return await self._in_thread(self._generation)

    async def _in_thread(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, call, *args)

    def _generation(self) -> str | None:
        try:
            generation = manifest.generation(self._lab, self._directory)
        except manifest.ManifestError as error:
            raise SteeringError(str(error)) from error
        if generation != self._seen:
            # The lab was made again (or is gone): what this object held of it is void.
            self._headends.close()
            self._current.clear()
            self._plan = None
            self._seen = generation
        return generation

    def _lab_plan(self) -> LabPlan:
        generation = self._generation()
        if generation is None:
            raise SteeringError(f"netlab {self._lab!r} is not up")
        if self._plan is None or self._plan[0] != generation:
            try:
                plan = manifest.read(self._lab, self._directory)
            except manifest.ManifestError as error:
                raise SteeringError(str(error)) from error
            if plan is None:
                raise SteeringError(f"netlab {self._lab!r} is not up")
            self._plan = (generation, plan)
        return self._plan[1]

    def _heads(self, plan: LabPlan, decision: Decision) -> tuple[Headend, ...]:
        try:
            return headends(plan, decision, owner=self._owner)
        except PlanError as error:
            raise SteeringError(
                f"reservation {decision.reservation_id!r}: cannot steer "
                f"{self._owner or 'its'} segments: {error}"
            ) from error

    def _install_all(self, decisions: Sequence[Decision]) -> None:
        try:
            plan = self._lab_plan()
        except SteeringError as error:
            ids = ", ".join(repr(d.reservation_id) for d in decisions)
            raise SteeringError(f"reservation {ids}: cannot steer: {error}") from error
        planned = [(d, self._heads(plan, d)) for d in decisions]
        done: list[tuple[Headend, Headend | None]] = []
        for decision, heads in planned:
            for head in heads:
                place = (head.namespace, head.job)
                done.append((head, self._current.get(place)))
                try:
                    self._headends.install(head)
                except linux.LabError as error:
                    self._undo(done)
                    raise SteeringError(
                        f"reservation {decision.reservation_id!r}: steering segment "
                        f"{head.segment} ({head.owner}) in netlab {self._lab!r} failed: {error}"
                    ) from error
                self._current[place] = head

    def _remove_all(self, decisions: Sequence[Decision]) -> None:
        try:
            plan = self._lab_plan()
        except SteeringError:
            return  # no lab: nothing of it is installed
        for decision in decisions:
            try:
                heads = headends(plan, decision, owner=self._owner)
            except PlanError:
                continue  # not a path of the lab: nothing of it was installed
            for head in heads:
                try:
                    self._headends.remove(head)
                except linux.LabError as error:
                    raise SteeringError(
                        f"reservation {decision.reservation_id!r}: removing segment "
                        f"{head.segment} ({head.owner}) from netlab {self._lab!r} failed: {error}"
                    ) from error
                self._forget(head)

    def _missing(self, decisions: Sequence[Decision]) -> list[Decision]:
        plan = self._lab_plan()
        routed: dict[str, dict[str, str | None]] = {}
        found = []
        for decision in decisions:
            try:
                heads = headends(plan, decision, owner=self._owner)
            except PlanError:
                continue
            for head in heads:
                if head.namespace not in routed:
                    try:
                        routed[head.namespace] = self._headends.routed(head.namespace)
                    except linux.LabError:
                        routed[head.namespace] = {}
                if routed[head.namespace].get(head.job) != head.reservation_id:
                    found.append(decision)
                    break
        return found

    def _links_down(self, link_ids: Sequence[str]) -> set[str]:
        try:
            plan = self._lab_plan()
        except SteeringError as error:
            if not self._told_not_up:
                log.warning("%s: no link of it is taken for down until it is", error)
                self._told_not_up = True
            return set()
        self._told_not_up = False
        return linux.links_down(plan, link_ids)

    def _undo(self, done: Sequence[tuple[Headend, Headend | None]]) -> None:
        """Remove the headends of `done`, last first, and put back what this object had
        installed at each of their places before (a headend installed again over itself is
        left as it is)."""
        for head, before in reversed(done):
            if head == before:
                continue
            try:
                self._headends.remove(head)
                self._forget(head)
                if before is not None:
                    self._headends.install(before)
                    self._current[(before.namespace, before.job)] = before
            except linux.LabError as error:
                log.warning("could not roll back the headend of %s: %s", head.reservation_id, error)

    def _forget(self, head: Headend) -> None:
        place = (head.namespace, head.job)
        current = self._current.get(place)
        if current is not None and current.reservation_id == head.reservation_id:
            del self._current[place]


class NoDataPlane:
    """`Steering` of a brain without a data plane (`steering = off`): it installs and removes
    nothing and has no link down, so the brain's steered paths follow its ledger only, to
    re-route what crosses a link an operator reported down."""

    GENERATION = "no-data-plane"

    def __init__(self, *, owner: str | None) -> None:
        self._owner = owner

    @property
    def owner(self) -> str | None:
        return self._owner

    async def install(self, decisions: Sequence[Decision]) -> None:
        return None

    async def remove(self, decisions: Sequence[Decision]) -> None:
        return None

    async def missing(self, decisions: Sequence[Decision]) -> list[Decision]:
        return []

    async def links_down(self, link_ids: Iterable[str]) -> set[str]:
        return set()

    async def generation(self) -> str | None:
        return self.GENERATION

    def close(self) -> None:
        return None


def steering_of(setting: str, *, lab: str, owner: str | None) -> NetlabSteering | NoDataPlane:
    """The steering a brain's settings ask for (`steering`, `netlab`)."""
    if setting == "off":
        return NoDataPlane(owner=owner)
    if setting == "netlab":
        return NetlabSteering(lab=lab, owner=owner)
    raise ValueError(f"steering {setting!r}: off or netlab")
