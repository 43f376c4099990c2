"""Following the federation's policy, which the national brain holds (`national.policy`):
its weight matrix and its priority classes. Every `interval_s` this brain asks for each,
naming the digest of its own, and when the national brain's differs, stores it (audited as
set by the national brain) and applies it (the weight matrix: its engine rebuilt and its
replicas told; the classes: read from the database by every replica's next admission and
submission). An operator's change on any regional brain goes to the national brain first
(`map_admin.MapAdministration.set_weight_matrix`,
`priority_classes.ManagePriorityClasses`), so every brain follows it within one interval."""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.live_map import LiveMap
from cnbrain.placement.weights import WeightMatrix
from cnbrain.regional.use_cases.ports import NationalPolicy
from cnbrain.scheduling.classes import PriorityClasses
from cnbrain.storage import audit, priority_classes
from cnbrain.storage.weights import get_weight_matrix, set_weight_matrix_audited

log = logging.getLogger("cnbrain.regional")

NATIONAL_ACTOR = "national"
"""The actor of a change that came from the national brain."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Followed(Generic[T]):
    """One part of the federation's policy this brain follows: `what` it is (for the log),
    the digest of this brain's own (`known`), the national brain's unless its digest is the
    one named (`fetch`, None then; raises PeerUnavailable), and how this brain takes it
    (`take`)."""

    what: str
    known: Callable[[], Awaitable[str]]
    fetch: Callable[[str], Awaitable[T | None]]
    take: Callable[[T], Awaitable[None]]


class FollowPolicy:
    """This brain's policy kept equal to the federation's, part by part (module docstring)."""

    def __init__(self, parts: Sequence[Followed[Any]], *, interval_s: float) -> None:
        self._parts = list(parts)
        self._interval_s = interval_s

    async def once(self) -> list[str]:
        """Take every part of the federation's policy that differs from this brain's; what
        it took. Raises PeerUnavailable when the national brain cannot be reached."""
        taken: list[str] = []
        for part in self._parts:
            value = await part.fetch(await part.known())
            if value is not None:
                await part.take(value)
                taken.append(part.what)
        return taken

    async def run(self) -> None:
        """`once` every `interval_s`, until cancelled. A round that fails (the national
        brain unreachable, or a write that lost a race with an operator's change of the same
        part on this brain) is logged and made again at the next interval."""
        while True:
            try:
                for what in await self.once():
                    log.info("took the federation's %s from the national brain", what)
            except PeerUnavailable as error:
                log.info("could not ask the national brain for the federation's policy: %s", error)
            except Exception:
                log.warning("could not take the federation's policy; trying again", exc_info=True)
            await asyncio.sleep(self._interval_s)


def follow_weight_matrix(
    *,
    sessions: async_sessionmaker[AsyncSession],
    live_map: LiveMap,
    national: NationalPolicy,
    announce: Callable[[], Awaitable[None]],
) -> Followed[WeightMatrix]:
    """The weight matrix: stored when it differs from the database's, then the engine
    rebuilt with it and the replicas told (`announce`)."""

    async def known() -> str:
        return live_map.engine.config.weight_matrix.digest()

    async def fetch(known_digest: str) -> WeightMatrix | None:
        return await national.weight_matrix(known_digest=known_digest)

    async def take(matrix: WeightMatrix) -> None:
        async with sessions.begin() as session:
            if (await get_weight_matrix(session)).digest() != matrix.digest():
                await set_weight_matrix_audited(session, matrix=matrix, actor=NATIONAL_ACTOR)
        await live_map.reload()
        await announce()

    return Followed("weight matrix", known, fetch, take)


def follow_priority_classes(
    *, sessions: async_sessionmaker[AsyncSession], national: NationalPolicy
) -> Followed[PriorityClasses]:
    """The priority classes: the stored set replaced by the federation's
    (`store_federation_classes`)."""

    async def known() -> str:
        async with sessions() as session:
            stored = await priority_classes.list_classes(session)
        return "" if stored is None else stored.digest()

    async def fetch(known_digest: str) -> PriorityClasses | None:
        return await national.priority_classes(known_digest=known_digest)

    async def take(classes: PriorityClasses) -> None:
        await store_federation_classes(sessions, classes, actor=NATIONAL_ACTOR)

    return Followed("priority classes", known, fetch, take)


async def store_federation_classes(
    sessions: async_sessionmaker[AsyncSession], classes: PriorityClasses, *, actor: str
) -> bool:
    """Make the stored set `classes`, audited (`priority_classes.followed` by `actor`) when
    it differed; whether it did."""
    async with sessions.begin() as session:
        if not await priority_classes.replace_classes(session, classes):
            return False
        await audit.record(
            session,
            actor=actor,
            action="priority_classes.followed",
            object_type="priority_classes",
            object_id="federation",
            detail={
                "classes": [
                    {
                        "name": one.name,
                        "value": one.value,
                        "preemptible": one.preemptible,
                        "default_max_wait_s": one.default_max_wait_s,
                    }
                    for one in classes
                ],
                "default": classes.default.name,
            },
        )
    return True
