"""Steering: a brain installs its own segments of the paths it reserves in the data plane,
and removes them when the reservation is released.

`Steering` is the port the ledgers' commit and release call (`federation.local_ledger`, the
regional brain's placement, cancel and job end); `NetlabSteering` its adapter onto a netlab:
for every segment of a decision the brain owns, a headend at the segment's first node
(`plan.headends`). A brain without steering (`steering = "off"`) has none, and behaves as
before. Everything is keyed by the decision's reservation id: installing twice is installing
once, removing what is not installed does nothing, and a reservation of the same request
installed later takes the job's traffic over (the swap of a re-routed path) without the
earlier one's removal undoing it.
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
    """A reservation could not be steered; the message names it and says why."""


class Steering(Protocol):
    """One brain's steering of its segments."""

    @property
    def owner(self) -> str | None:
        """The brain whose segments it steers: a region id, `national`, or None (a
        standalone brain: every segment)."""

    async def install(self, decisions: Sequence[Decision]) -> None:
        """Install this brain's segments of every decision: all of them or, raising
        SteeringError (naming the reservation and why), none (what it installed is
        removed)."""

    async def remove(self, decisions: Sequence[Decision]) -> None:
        """Remove what this brain installed for every decision's reservation (nothing
        installed: nothing done). SteeringError when a step fails."""

    async def links_down(self, link_ids: Iterable[str]) -> set[str]:
        """Those of `link_ids` the data plane has down."""

    def close(self) -> None:
        """Let go of what it holds open."""


class NetlabSteering:
    """`Steering` onto the netlab `lab` (its plan read from its manifest, in `directory`) for
    the segments of `owner` (None: all). `close` lets its netlink sockets go."""

    def __init__(
        self, *, lab: str, owner: str | None, directory: Path = manifest.DIRECTORY
    ) -> None:
        self._lab = lab
        self._owner = owner
        self._directory = directory
        self._headends = linux.Headends()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"netlab-{lab}")
        """The one thread that does its netlink work (a netlink socket stays with its
        thread)."""

    @property
    def owner(self) -> str | None:
        return self._owner

    def close(self) -> None:
        self._thread.submit(self._headends.close).result()
        self._thread.shutdown()

    async def install(self, decisions: Sequence[Decision]) -> None:
        planned = [(d, self._plan_of(d)) for d in decisions]
        await self._in_thread(self._install_all, planned)

    async def remove(self, decisions: Sequence[Decision]) -> None:
        planned = [(d, self._plan_of(d, removing=True)) for d in decisions]
        await self._in_thread(self._remove_all, planned)

    async def links_down(self, link_ids: Iterable[str]) -> set[str]:
        return await self._in_thread(linux.links_down, self._lab_plan(), list(link_ids))

    async def _in_thread(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, call, *args)

    def _lab_plan(self) -> LabPlan:
        plan = manifest.read(self._lab, self._directory)
        if plan is None:
            raise SteeringError(f"netlab {self._lab!r} is not up")
        return plan

    def _plan_of(self, decision: Decision, *, removing: bool = False) -> tuple[Headend, ...]:
        try:
            return headends(self._lab_plan(), decision, owner=self._owner)
        except (PlanError, SteeringError) as error:
            if removing:
                return ()  # no lab, or not a path of it: nothing of it was installed
            raise SteeringError(
                f"reservation {decision.reservation_id!r}: cannot steer "
                f"{self._owner or 'its'} segments: {error}"
            ) from error

    def _install_all(self, planned: Sequence[tuple[Decision, tuple[Headend, ...]]]) -> None:
        done: list[Headend] = []
        for decision, heads in planned:
            for head in heads:
                done.append(head)
                try:
                    self._headends.install(head)
                except linux.LabError as error:
                    self._undo(done)
                    raise SteeringError(
                        f"reservation {decision.reservation_id!r}: steering segment "
                        f"{head.segment} ({head.owner}) in netlab {self._lab!r} failed: {error}"
                    ) from error

    def _remove_all(self, planned: Sequence[tuple[Decision, tuple[Headend, ...]]]) -> None:
        for decision, heads in planned:
            for head in heads:
                try:
                    self._headends.remove(head)
                except linux.LabError as error:
                    raise SteeringError(
                        f"reservation {decision.reservation_id!r}: removing segment "
                        f"{head.segment} ({head.owner}) from netlab {self._lab!r} failed: {error}"
                    ) from error

    def _undo(self, done: Sequence[Headend]) -> None:
        for head in reversed(done):
            try:
                self._headends.remove(head)
            except linux.LabError:
                log.exception("could not roll back the headend of %s", head.reservation_id)


def steering_of(setting: str, *, lab: str, owner: str | None) -> NetlabSteering | None:
    """The steering a brain's settings ask for (`steering`, `netlab`): None for "off"."""
    if setting == "off":
        return None
    if setting == "netlab":
        return NetlabSteering(lab=lab, owner=owner)
    raise ValueError(f"steering {setting!r}: off or netlab")
