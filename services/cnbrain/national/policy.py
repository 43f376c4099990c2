"""The federation's policy that the national brain holds for every brain: the operators'
weight matrix. A regional brain forwards an operator's change here; the national brain stores
it with its audit entry and its own engine decides with it from then on; every regional brain
follows it (`regional.use_cases.policy_sync`)."""

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.federation.live_map import LiveMap
from cnbrain.placement.weights import WeightMatrix
from cnbrain.storage.weights import set_weight_matrix_audited


class FederationPolicy:
    """Setting the federation's weight matrix in the national brain."""

    def __init__(self, *, sessions: async_sessionmaker[AsyncSession], live_map: LiveMap) -> None:
        self._sessions = sessions
        self._live_map = live_map

    async def set_weight_matrix(self, matrix: WeightMatrix, *, actor: str) -> None:
        """Store `matrix`, audited as set by `actor`, and rebuild the engine with it."""
        async with self._sessions.begin() as session:
            await set_weight_matrix_audited(session, matrix=matrix, actor=actor)
        await self._live_map.reload()
