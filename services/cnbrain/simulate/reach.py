"""Which sites a job could still reach over links that have its bandwidth free.

The engine routes a job over links whose free bandwidth is at least the job's need
(`CycleState.blocked`), within its latency bound, in three segments on the owners' graphs,
never through a site. The shortest path over the whole map graph using only such links (any
path, sites included) is never longer than any route the engine could take; so a site whose
shortest such path exceeds the job's bound, or that no such path reaches, cannot be served,
and the simulator does not ask the engine. This is a necessary condition only: it keeps the
engine the judge of every job it lets through.

Distances are computed with Dijkstra per access node, on demand, and kept while the set of
links below a need stays the same (per need value, only the latest set is kept).
"""

import heapq
import math
from collections.abc import Sequence

import numpy as np

from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import FloatArray, IntArray, MapArrays

SLACK_MS = 1e-6
"""Tolerance on the latency comparison, so that rounding never removes a servable site."""


class Reach:
    """Lower bounds on route latency from access nodes to sites, given free bandwidth."""

    def __init__(self, arrays: MapArrays, access_nodes: Sequence[str]) -> None:
        cmap = arrays.map
        names = list(cmap.nodes) + [site.id for site in cmap.sites]
        self._index = {name: i for i, name in enumerate(names)}
        self._sites = np.asarray([self._index[site.id] for site in cmap.sites], dtype=np.int64)
        self._adjacent: list[list[tuple[int, int, float]]] = [[] for _ in names]
        for i, link in enumerate(cmap.links):
            a, b = self._index[link.a], self._index[link.b]
            self._adjacent[a].append((b, i, link.latency_ms))
            self._adjacent[b].append((a, i, link.latency_ms))
        self._access = [self._index[node] for node in access_nodes]
        self._cache: dict[int, tuple[bytes, dict[int, FloatArray]]] = {}

    def within(
        self,
        snapshot: Snapshot,
        *,
        access: IntArray,
        need_mbps: IntArray,
        bound_ms: FloatArray,
    ) -> np.ndarray:
        """(jobs x sites): True where a path of links with `need_mbps` free reaches the site
        within `bound_ms` (inf: any length). `access` indexes the constructor's access nodes.
        Jobs that ask for no bandwidth are not checked (all True)."""
        out = np.ones((len(access), len(self._sites)), dtype=bool)
        for need in np.unique(need_mbps[need_mbps > 0]).tolist():
            blocked = snapshot.residual_mbps < need
            key = np.packbits(blocked).tobytes()
            cached = self._cache.get(need)
            if cached is None or cached[0] != key:
                cached = (key, {})
                self._cache[need] = cached
            distances = cached[1]
            rows = np.flatnonzero(need_mbps == need)
            nodes, position = np.unique(access[rows], return_inverse=True)
            for node in nodes.tolist():
                if node not in distances:
                    distances[node] = self._dijkstra(self._access[node], blocked)
            table = np.stack([distances[node] for node in nodes.tolist()])
            dist = table[position.reshape(-1)]
            out[rows] = np.isfinite(dist) & (dist <= bound_ms[rows, None] + SLACK_MS)
        return out

    def _dijkstra(self, source: int, blocked: np.ndarray) -> FloatArray:
        """Shortest latency from `source` to every site over links not `blocked`."""
        dist = [math.inf] * len(self._adjacent)
        dist[source] = 0.0
        heap = [(0.0, source)]
        is_blocked = blocked.tolist()
        while heap:
            d, node = heapq.heappop(heap)
            if d > dist[node]:
                continue
            for other, link, latency in self._adjacent[node]:
                if is_blocked[link]:
                    continue
                nd = d + latency
                if nd < dist[other]:
                    dist[other] = nd
                    heapq.heappush(heap, (nd, other))
        return np.asarray(dist, dtype=np.float64)[self._sites]
