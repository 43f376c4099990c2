"""k shortest paths by latency that avoid blocked links, with a cache."""

import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from cnbrain.netmap.arrays import IntArray

ENUMERATION_LIMIT = 16
"""Paths kept per node pair before falling back to a search on the pruned graph."""

Blocked = frozenset[int]
"""Indices of links a path may not use (for example, those without enough residual bandwidth)."""


@dataclass(frozen=True, slots=True)
class GraphPath:
    nodes: tuple[str, ...]
    links: tuple[int, ...]
    link_array: IntArray
    latency_ms: float

    def avoids(self, blocked: Blocked) -> bool:
        return blocked.isdisjoint(self.links)

    def extended(self, node: str, link: int, latency_ms: float) -> "GraphPath":
        """This path followed by `link` to `node`."""
        return GraphPath(
            nodes=(*self.nodes, node),
            links=(*self.links, link),
            link_array=np.append(self.link_array, link),
            latency_ms=self.latency_ms + latency_ms,
        )

    def preceded(self, node: str, link: int, latency_ms: float) -> "GraphPath":
        """`link` from `node` followed by this path."""
        return GraphPath(
            nodes=(node, *self.nodes),
            links=(link, *self.links),
            link_array=np.insert(self.link_array, 0, link),
            latency_ms=self.latency_ms + latency_ms,
        )

    def reversed(self) -> "GraphPath":
        """The same path walked the other way (links carry both directions)."""
        return GraphPath(
            nodes=self.nodes[::-1],
            links=self.links[::-1],
            link_array=self.link_array[::-1].copy(),
            latency_ms=self.latency_ms,
        )


@dataclass(slots=True)
class _Enumeration:
    found: list[GraphPath] = field(default_factory=list)
    pending: Iterator[list[str]] | None = None


class PathFinder:
    """Enumerates simple paths of one graph in order of latency, lazily and once per pair.

    `k_feasible` returns the k lowest-latency paths that use no blocked link. That equals the
    k shortest paths of the graph without the blocked links, because removing links only
    removes paths and keeps the order of the rest. Thread-safe.
    """

    def __init__(self, graph: "nx.Graph[str]") -> None:
        self._graph = graph
        self._cache: dict[tuple[str, str], _Enumeration] = {}
        self._lock = threading.Lock()

    def k_feasible(self, source: str, target: str, *, k: int, blocked: Blocked) -> list[GraphPath]:
        if source == target:
            return [GraphPath((source,), (), np.empty(0, dtype=np.int64), 0.0)]
        with self._lock:
            enum = self._cache.get((source, target))
            if enum is None:
                enum = _Enumeration(pending=self._simple_paths(self._graph, source, target))
                self._cache[(source, target)] = enum
            chosen = [p for p in enum.found if p.avoids(blocked)][:k]
            while (
                len(chosen) < k and enum.pending is not None and len(enum.found) < ENUMERATION_LIMIT
            ):
                nodes = next(enum.pending, None)
                if nodes is None:
                    enum.pending = None
                    break
                path = self._to_path(nodes)
                enum.found.append(path)
                if path.avoids(blocked):
                    chosen.append(path)
            if len(chosen) < k and enum.pending is not None:
                return self._search_pruned(source, target, k=k, blocked=blocked)
            return chosen

    def _search_pruned(
        self, source: str, target: str, *, k: int, blocked: Blocked
    ) -> list[GraphPath]:
        graph = self._graph
        pruned = nx.subgraph_view(graph, filter_edge=lambda a, b: graph[a][b]["idx"] not in blocked)
        if source not in pruned or target not in pruned:
            return []
        return [
            self._to_path(nodes)
            for nodes in itertools.islice(self._simple_paths(pruned, source, target), k)
        ]

    @staticmethod
    def _simple_paths(graph: "nx.Graph[str]", source: str, target: str) -> Iterator[list[str]]:
        try:
            yield from nx.shortest_simple_paths(graph, source, target, weight="latency_ms")
        except (nx.NetworkXNoPath, nx.NodeNotFound):
            return

    def _to_path(self, nodes: list[str]) -> GraphPath:
        edges = [self._graph[a][b] for a, b in itertools.pairwise(nodes)]
        links = tuple(int(e["idx"]) for e in edges)
        return GraphPath(
            nodes=tuple(nodes),
            links=links,
            link_array=np.asarray(links, dtype=np.int64),
            latency_ms=float(sum(e["latency_ms"] for e in edges)),
        )
