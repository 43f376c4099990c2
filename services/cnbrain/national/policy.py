"""The federation's policy that the national brain holds for every brain: the operators'
weight matrix and priority classes. A regional brain forwards an operator's change here; the
national brain stores it with its audit entry (its own engine decides with the matrix from
then on); every regional brain follows both (`regional.use_cases.policy_sync`), and every
other replica of the national brain takes the matrix from the database they share
(`follow_replicas_forever`)."""

import asyncio
import logging

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.errors import Internal
from cnbrain.federation.live_map import LiveMap
from cnbrain.placement.weights import WeightMatrix
from cnbrain.scheduling.classes import PriorityClass, PriorityClasses
from cnbrain.storage import audit, priority_classes
from cnbrain.storage.weights import get_weight_matrix, set_weight_matrix_audited

log = logging.getLogger("cnbrain.national")


class FederationPolicy:
    """Setting the federation's weight matrix and priority classes in the national brain."""

    def __init__(self, *, sessions: async_sessionmaker[AsyncSession], live_map: LiveMap) -> None:
        self._sessions = sessions
        self._live_map = live_map

    async def set_weight_matrix(self, matrix: WeightMatrix, *, actor: str) -> None:
        """Store `matrix`, audited as set by `actor`, and rebuild the engine with it."""
        async with self._sessions.begin() as session:
            await set_weight_matrix_audited(session, matrix=matrix, actor=actor)
        await self._live_map.reload()

    async def follow_replicas_forever(self, interval_s: float) -> None:
        """Every `interval_s`, until cancelled: rebuild the engine when the weight matrix
        stored differs from the one it decides with (another replica set it), and forget the
        cached snapshot of free capacity (other replicas reserve on the backbone too). A
        look that fails is logged and made again at the next turn."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                async with self._sessions() as session:
                    stored = await get_weight_matrix(session)
                if stored != self._live_map.engine.config.weight_matrix:
                    await self._live_map.reload()
                    log.info("took the weight matrix another replica stored")
                else:
                    self._live_map.capacity_changed()
            except Exception:
                log.warning("could not follow the other replicas", exc_info=True)

    async def priority_classes(self) -> PriorityClasses:
        """The federation's priority classes."""
        async with self._sessions() as session:
            return _present(await priority_classes.list_classes(session))

    async def put_priority_class(
        self, one: PriorityClass, *, default: bool, actor: str
    ) -> tuple[PriorityClasses, bool]:
        """Create or replace `one` (the default class when `default`), audited as put by
        `actor`; the set now in force, and whether the class is new. Raises ClassConflict
        (storing nothing) when the set's rules refuse it (`storage.priority_classes`)."""
        async with self._sessions.begin() as session:
            created = await priority_classes.put_class(session, one, default=default)
            await audit.record(
                session,
                actor=actor,
                action="priority_class.created" if created else "priority_class.replaced",
                object_type="priority_class",
                object_id=one.name,
                detail={
                    "value": one.value,
                    "preemptible": one.preemptible,
                    "default_max_wait_s": one.default_max_wait_s,
                    "default": default,
                },
            )
            classes = _present(await priority_classes.list_classes(session))
        return classes, created

    async def delete_priority_class(self, name: str, *, actor: str) -> PriorityClasses:
        """Delete the class called `name`, audited as deleted by `actor`; the set now in
        force. Raises NotFoundError (none) or ClassConflict (the default class, or one that
        requests this brain holds name), deleting nothing."""
        async with self._sessions.begin() as session:
            await priority_classes.delete_class(session, name=name)
            await audit.record(
                session,
                actor=actor,
                action="priority_class.deleted",
                object_type="priority_class",
                object_id=name,
            )
            return _present(await priority_classes.list_classes(session))


def _present(classes: PriorityClasses | None) -> PriorityClasses:
    if classes is None:
        raise Internal("the national brain has no priority classes stored")
    return classes
