"""Following the federation's weight matrix, which the national brain holds
(`national.policy`): every `interval_s` this brain asks for it, naming the digest of its own,
and when the national brain's differs, stores it (audited as set by the national brain),
rebuilds its engine and tells its replicas. An operator's change on any regional brain goes
to the national brain first (`map_admin.MapAdministration.set_weight_matrix`), so every
brain follows it within one interval."""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.live_map import LiveMap
from cnbrain.regional.use_cases.ports import NationalPolicy
from cnbrain.storage.weights import get_weight_matrix, set_weight_matrix_audited

log = logging.getLogger("cnbrain.regional")

NATIONAL_ACTOR = "national"
"""The actor of a change that came from the national brain."""


class FollowWeightMatrix:
    """This brain's weight matrix kept equal to the federation's (module docstring)."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        live_map: LiveMap,
        national: NationalPolicy,
        announce: Callable[[], Awaitable[None]],
        interval_s: float,
    ) -> None:
        self._sessions = sessions
        self._live_map = live_map
        self._national = national
        self._announce = announce
        self._interval_s = interval_s

    async def once(self) -> bool:
        """Take the federation's matrix if it differs from this brain's; whether it did.
        Raises PeerUnavailable when the national brain cannot be reached."""
        known = self._live_map.engine.config.weight_matrix.digest()
        matrix = await self._national.weight_matrix(known_digest=known)
        if matrix is None:
            return False
        async with self._sessions.begin() as session:
            if (await get_weight_matrix(session)).digest() != matrix.digest():
                await set_weight_matrix_audited(session, matrix=matrix, actor=NATIONAL_ACTOR)
        await self._live_map.reload()
        await self._announce()
        return True

    async def run(self) -> None:
        """`once` every `interval_s`, until cancelled; an unreachable national brain is
        logged and asked again at the next interval."""
        while True:
            try:
                if await self.once():
                    log.info("took the federation's weight matrix from the national brain")
            except PeerUnavailable as error:
                log.info("could not ask the national brain for the weight matrix: %s", error)
            await asyncio.sleep(self._interval_s)
