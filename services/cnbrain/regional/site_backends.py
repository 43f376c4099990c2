"""The cluster backends of a brain's sites: one per site and `BackendRef`, built on first use.

A site's backend comes from its `execution` (`cnbrain.domain.site.Site`), as the brain's map
has it, or from the registry for a site no longer in the map. When an operator changes a
site's `execution`, the next use builds a new backend; the old one is kept (jobs it holds in a
simulator stay reachable through it) until `aclose`.
"""

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.backend_ref import BackendRef
from cnbrain.execution import Clock, ClusterBackend, CredentialStore, backend_for
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.storage import registry


class SiteBackends:
    """Backends by (site id, reference). `clock` is the simulators' clock (the system's by
    default); `credentials` the store Slurm backends take their tokens from (none: empty).
    The owner calls `aclose` once, when it stops."""

    def __init__(
        self, *, clock: Clock | None = None, credentials: CredentialStore | None = None
    ) -> None:
        self._clock = clock
        self._credentials = credentials or CredentialStore()
        self._backends: dict[tuple[str, str], ClusterBackend] = {}

    def get(self, site_id: str, ref: BackendRef) -> ClusterBackend:
        """The backend of `site_id` for `ref` (the same object for the same pair)."""
        key = (site_id, ref.model_dump_json())
        backend = self._backends.get(key)
        if backend is None:
            backend = backend_for(ref, clock=self._clock, credentials=self._credentials)
            self._backends[key] = backend
        return backend

    async def aclose(self) -> None:
        """Close every backend (idempotent)."""
        backends, self._backends = list(self._backends.values()), {}
        for backend in backends:
            await backend.aclose()


async def site_ref(
    cmap: ComputeNetworkMap, sessions: async_sessionmaker[AsyncSession], site_id: str
) -> BackendRef:
    """The backend reference of `site_id`: from the map, else from the registry (a retired
    site). Raises `registry.UnknownItem` for a site never registered."""
    index = cmap.site_index.get(site_id)
    if index is not None:
        return cmap.sites[index].execution
    async with sessions() as session:
        return await registry.site_execution(session, site_id=site_id)
