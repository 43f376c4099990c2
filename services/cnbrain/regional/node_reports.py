"""What the schedulers of the brain's sites report of their nodes, read every
`node_report_interval_s` and kept for the snapshot (`storage.node_reports`): two-level
scheduling, where the site's scheduler knows the nodes and the brain keeps, per node pool,
how many nodes have each number of units free.

A site is read when its map entry has node pools and it runs on Slurm (a simulator has no
nodes to report). A report counts for `REPORT_LIFETIMES` intervals; a site that cannot be
read keeps its last report until then, and is then known by the brain's own reservations
alone. A report that changes what a pool shows free is a change of capacity: the cached
snapshot is dropped, the other replicas are told, and the admission loop wakes.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Final

from cnbrain.background import finished
from cnbrain.domain.backend_ref import BackendRef
from cnbrain.domain.site import Site
from cnbrain.execution import BackendError, ClusterBackend, SlurmBackend
from cnbrain.execution.pool_reports import reported_summaries
from cnbrain.ledger.nodes import Pool, PoolReport
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.regional.unit_of_work import CapacityChanges
from cnbrain.storage import node_reports
from cnbrain.storage.clock import utcnow

log = logging.getLogger("cnbrain.regional")

REPORT_LIFETIMES: Final = 3
"""Intervals a site's report counts for after it was read."""


class NodeReports:
    """Reads the node lists of `map()`'s Slurm sites with node pools (through `backend_of`, a
    site id to its reference and backend) and keeps them through `changes`, every
    `interval_s` (`run_forever`; module docstring)."""

    def __init__(
        self,
        *,
        map: Callable[[], ComputeNetworkMap],
        backend_of: Callable[[str], Awaitable[tuple[BackendRef, ClusterBackend]]],
        changes: CapacityChanges,
        interval_s: float,
    ) -> None:
        self._map = map
        self._backend_of = backend_of
        self._changes = changes
        self._interval_s = interval_s
        self._failing: set[str] = set()

    async def run_forever(self) -> None:
        """`run_once` every `interval_s` until cancelled; a read that fails (the database
        down, say) is logged, and the next one tries again."""
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("reading the sites' node reports failed; the next read tries again")
            await asyncio.sleep(self._interval_s)

    def reads(self, site_id: str) -> bool:
        """Whether site `site_id` is one whose node list is read: on the map, with node
        pools, on Slurm."""
        cmap = self._map()
        return site_id in cmap.site_index and _reported(cmap.site(site_id))

    async def run_once(self) -> None:
        """Read every such site's node list now (all at once) and keep what it reports. A
        site that cannot be read is logged (once until it can be read again) and skipped."""
        sites = [
            (site.id, tuple(Pool.of(pool) for pool in site.node_pools))
            for site in self._map().sites
            if _reported(site)
        ]
        read = await asyncio.gather(*(self._read(site_id, pools) for site_id, pools in sites))
        for (site_id, pools), reports in zip(sites, read, strict=True):
            if reports is not None:
                await finished(self._keep(site_id, pools, reports))

    async def _read(self, site_id: str, pools: tuple[Pool, ...]) -> list[PoolReport] | None:
        ref, backend = await self._backend_of(site_id)
        if not isinstance(backend, SlurmBackend):
            return None
        try:
            nodes = await backend.nodes()
        except BackendError as exc:
            if site_id not in self._failing:
                log.warning("site %s: no node list from its scheduler: %s", site_id, exc)
                self._failing.add(site_id)
            return None
        if site_id in self._failing:
            log.info("site %s: its scheduler reports its nodes again", site_id)
            self._failing.discard(site_id)
        return list(reported_summaries(pools, nodes, ref.gpu_types, ref.gpu_shards))

    async def _keep(self, site_id: str, pools: tuple[Pool, ...], reports: list[PoolReport]) -> None:
        expires_at = utcnow() + timedelta(seconds=self._interval_s * REPORT_LIFETIMES)
        async with self._changes.begin() as (session, change):
            changed = await node_reports.put(
                session, site_id=site_id, pools=pools, reports=reports, expires_at=expires_at
            )
            if changed:
                change.free()  # drops the cached snapshot, tells the replicas, wakes admission


def _reported(site: Site) -> bool:
    return bool(site.node_pools) and site.execution.kind == "slurm"
