"""Routes assembled from segments that their owners computed elsewhere.

The national brain places a cross-region request with this router: the source segments come
from the source region's brain, each candidate site's destination segments from the brain
that owns the site, and the backbone segments from the national brain's own graph.
"""

import math
from collections.abc import Mapping, Sequence

from cnbrain.routing.latency_bounds import LatencyBounds
from cnbrain.routing.paths import Blocked, GraphPath
from cnbrain.routing.router import NOTHING_BLOCKED, Route, SegmentRouter, combine


class ComposedRouter:
    """Routes from the access nodes of `sources` (each with its source paths, access node to
    its gateway) to the sites of `destinations` (per site index, the site's gateway to the
    site), joined by backbone paths of `backbone`. Sites in the source province, or without
    destination paths, get no route. Paths are offered to every request of a cycle; each
    request keeps only those that avoid the links without its bandwidth."""

    def __init__(
        self,
        backbone: SegmentRouter,
        *,
        sources: Mapping[str, Sequence[GraphPath]],
        destinations: Mapping[int, Sequence[GraphPath]],
    ) -> None:
        self._backbone = backbone
        self._sources = {node: tuple(paths) for node, paths in sources.items()}
        self._destinations = destinations

    @property
    def bounds(self) -> LatencyBounds:
        return self._backbone.bounds

    def routes(
        self,
        *,
        access_node: str,
        sites: Sequence[int],
        k: int,
        blocked: Blocked = NOTHING_BLOCKED,
        max_latency_ms: float = math.inf,
    ) -> list[list[Route]]:
        source = self._sources.get(access_node)
        if source is None:
            raise ValueError(
                f"routes were composed for {sorted(self._sources)}, not {access_node!r}"
            )
        cmap = self._backbone.map
        src = cmap.node_province[access_node]
        first = [p for p in source if p.avoids(blocked)][:k]
        out: list[list[Route]] = []
        for site in sites:
            dst = cmap.sites[site].province
            last = [p for p in self._destinations.get(site, ()) if p.avoids(blocked)][:k]
            if dst == src or not first or not last:
                out.append([])
                continue
            middle = self._backbone.backbone_paths(
                cmap.provinces[src].gateway, cmap.provinces[dst].gateway, k=k, blocked=blocked
            )
            routes = combine(cmap.region_of(src), cmap.region_of(dst), first, middle, last, k=k)
            out.append([r for r in routes if r.latency_ms <= max_latency_ms])
        return out
