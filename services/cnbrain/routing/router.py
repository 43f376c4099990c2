"""Three-segment routing: each segment on its owner's graph, then the k best combinations."""

import heapq
import itertools
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from cnbrain.domain.decision import SegmentKind
from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.netmap.arrays import IntArray, MapArrays
from cnbrain.routing.latency_bounds import LatencyBounds
from cnbrain.routing.paths import Blocked, GraphPath, PathFinder
from cnbrain.routing.subgraphs import Attachment, OwnerGraphs

CACHE_LIMIT = 500_000
"""Entries a route cache keeps before it starts afresh."""

NOTHING_BLOCKED: Blocked = frozenset()


@dataclass(frozen=True, slots=True)
class RouteSegment:
    kind: SegmentKind
    owner: str
    path: GraphPath


@dataclass(frozen=True, slots=True)
class Route:
    """A path from a user's access node to a site, as one to three segments."""

    segments: tuple[RouteSegment, ...]
    latency_ms: float
    links: tuple[int, ...]
    link_array: IntArray

    @classmethod
    def of(cls, segments: tuple[RouteSegment, ...]) -> "Route":
        links = tuple(link for s in segments for link in s.path.links)
        return cls(
            segments=segments,
            latency_ms=sum(s.path.latency_ms for s in segments),
            links=links,
            link_array=np.asarray(links, dtype=np.int64),
        )


class RouteSource(Protocol):
    """Where a placement cycle gets its routes and the latency lower bounds of its filters."""

    @property
    def bounds(self) -> LatencyBounds: ...

    def routes(
        self,
        *,
        access_node: str,
        sites: Sequence[int],
        k: int,
        blocked: Blocked = NOTHING_BLOCKED,
        max_latency_ms: float = math.inf,
    ) -> list[list[Route]]: ...


class SegmentRouter:
    """Computes routes from an access node to sites, and between two sites (`site_routes`).

    Same province: one `local` segment on the province's graph. Otherwise: `source` (access
    node to the source gateway, source province graph), `backbone` (gateway to gateway,
    backbone links only) and `destination` (gateway to site, destination province graph).
    Each segment is one of the k lowest-latency paths that avoid the blocked links; a site
    gets the k lowest-latency combinations within `max_latency_ms`.

    The k best routes with nothing blocked are cached per (access node, site, k). When none
    of them uses a blocked link they are also the k best that avoid the blocked links, and
    the cache answers; otherwise the routes avoiding that blocked set are computed, and
    cached under it too.
    """

    def __init__(self, arrays: MapArrays) -> None:
        self.map = arrays.map
        graphs = OwnerGraphs.build(arrays.map)
        self._attachments = graphs.attachments
        self.bounds = LatencyBounds(arrays, graphs)
        self._province = {code: PathFinder(g) for code, g in graphs.province.items()}
        self._backbone = PathFinder(graphs.backbone)
        self._best: dict[tuple[str, int, int], list[Route]] = {}
        self._avoiding: dict[tuple[str, int, int, Blocked], list[Route]] = {}
        self._between: dict[tuple[int, int, int], list[Route]] = {}
        self._lock = threading.Lock()

    def routes(
        self,
        *,
        access_node: str,
        sites: Sequence[int],
        k: int,
        blocked: Blocked = NOTHING_BLOCKED,
        max_latency_ms: float = math.inf,
    ) -> list[list[Route]]:
        """For each of `sites`, its up to k best routes from `access_node`, best first."""
        out: list[list[Route]] = []
        for site in sites:
            key = (access_node, site, k)
            with self._lock:
                best = self._best.get(key)
            if best is None:
                best = self._compute(access_node, site, k, NOTHING_BLOCKED)
                with self._lock:
                    if len(self._best) >= CACHE_LIMIT:
                        self._best.clear()
                    self._best[key] = best
            if blocked and not all(blocked.isdisjoint(r.links) for r in best):
                best = self._avoiding_blocked(access_node, site, k, blocked)
            out.append([r for r in best if r.latency_ms <= max_latency_ms])
        return out

    def site_routes(
        self,
        *,
        from_site: int,
        to_site: int,
        k: int,
        blocked: Blocked = NOTHING_BLOCKED,
        max_latency_ms: float = math.inf,
    ) -> list[Route]:
        """The up to k best routes from site `from_site` to site `to_site` that avoid the
        blocked links, best first, each within `max_latency_ms`: one empty route (no link,
        0 ms) for the same site; one `local` segment inside one province; otherwise a
        `source` segment (the first site to its province's gateway, on that province's
        graph), a `backbone` segment and a `destination` segment (gateway to the second
        site), each computed on its owner's graph as `routes` computes them from an access
        node."""
        key = (from_site, to_site, k)
        with self._lock:
            best = self._between.get(key)
        if best is None:
            best = self._between_sites(from_site, to_site, k, NOTHING_BLOCKED)
            with self._lock:
                if len(self._between) >= CACHE_LIMIT:
                    self._between.clear()
                self._between[key] = best
        if blocked and not all(blocked.isdisjoint(r.links) for r in best):
            best = self._between_sites(from_site, to_site, k, blocked)
        return [r for r in best if r.latency_ms <= max_latency_ms]

    def _between_sites(self, from_site: int, to_site: int, k: int, blocked: Blocked) -> list[Route]:
        cmap = self.map
        if from_site == to_site:
            return [Route.of(())]
        src = cmap.sites[from_site].province
        dst = cmap.sites[to_site].province
        if src == dst:
            finder = self._province[src]
            site_id = cmap.sites[from_site].id
            candidates = [
                path.preceded(site_id, att.link, att.latency_ms)
                for att in self._attachments[from_site]
                if att.link not in blocked
                for path in self._to_site(finder, att.node, to_site, k, blocked)
                if att.link not in path.links
            ]
            best = heapq.nsmallest(k, candidates, key=lambda p: p.latency_ms)
            return [
                Route.of((RouteSegment(SegmentKind.LOCAL, cmap.region_of(src), p),)) for p in best
            ]
        first = [p.reversed() for p in self.destination_paths(from_site, k=k, blocked=blocked)]
        middle = self.backbone_paths(
            cmap.provinces[src].gateway, cmap.provinces[dst].gateway, k=k, blocked=blocked
        )
        last = self.destination_paths(to_site, k=k, blocked=blocked)
        return combine(cmap.region_of(src), cmap.region_of(dst), first, middle, last, k=k)

    def _avoiding_blocked(
        self, access_node: str, site: int, k: int, blocked: Blocked
    ) -> list[Route]:
        key = (access_node, site, k, blocked)
        with self._lock:
            routes = self._avoiding.get(key)
        if routes is None:
            routes = self._compute(access_node, site, k, blocked)
            with self._lock:
                if len(self._avoiding) >= CACHE_LIMIT:
                    self._avoiding.clear()
                self._avoiding[key] = routes
        return routes

    def _compute(self, access_node: str, site: int, k: int, blocked: Blocked) -> list[Route]:
        cmap = self.map
        src = cmap.node_province[access_node]
        dst = cmap.sites[site].province
        if dst == src:
            return [
                Route.of((RouteSegment(SegmentKind.LOCAL, cmap.region_of(src), p),))
                for p in self._to_site(self._province[src], access_node, site, k, blocked)
            ]
        first = self.source_paths(access_node, k=k, blocked=blocked)
        middle = (
            self.backbone_paths(
                cmap.provinces[src].gateway, cmap.provinces[dst].gateway, k=k, blocked=blocked
            )
            if first
            else []
        )
        last = self.destination_paths(site, k=k, blocked=blocked) if middle else []
        return combine(cmap.region_of(src), cmap.region_of(dst), first, middle, last, k=k)

    def source_paths(self, access_node: str, *, k: int, blocked: Blocked) -> list[GraphPath]:
        """The k best paths from `access_node` to its province's backbone gateway."""
        province = self.map.node_province[access_node]
        gateway = self.map.provinces[province].gateway
        return self._province[province].k_feasible(access_node, gateway, k=k, blocked=blocked)

    def backbone_paths(
        self, from_gateway: str, to_gateway: str, *, k: int, blocked: Blocked
    ) -> list[GraphPath]:
        """The k best backbone paths between two province gateways."""
        return self._backbone.k_feasible(from_gateway, to_gateway, k=k, blocked=blocked)

    def destination_paths(self, site: int, *, k: int, blocked: Blocked) -> list[GraphPath]:
        """The k best paths from the backbone gateway of `site`'s province to the site."""
        province = self.map.sites[site].province
        gateway = self.map.provinces[province].gateway
        return self._to_site(self._province[province], gateway, site, k, blocked)

    def _to_site(
        self, finder: PathFinder, source: str, site: int, k: int, blocked: Blocked
    ) -> list[GraphPath]:
        """The k best paths from `source` to `site`: core paths to one of the site's attachment
        nodes, then the attaching link."""
        candidates: list[tuple[float, GraphPath, Attachment]] = []
        for att in self._attachments[site]:
            if att.link in blocked:
                continue
            for path in finder.k_feasible(source, att.node, k=k, blocked=blocked):
                candidates.append((path.latency_ms + att.latency_ms, path, att))
        best = heapq.nsmallest(k, candidates, key=lambda c: c[0])
        site_id = self.map.sites[site].id
        return [path.extended(site_id, att.link, att.latency_ms) for _, path, att in best]


def combine(
    source_owner: str,
    destination_owner: str,
    first: Sequence[GraphPath],
    middle: Sequence[GraphPath],
    last: Sequence[GraphPath],
    *,
    k: int,
) -> list[Route]:
    """The k lowest-latency routes of a source, a backbone and a destination path."""
    best = heapq.nsmallest(
        k,
        itertools.product(first, middle, last),
        key=lambda abc: abc[0].latency_ms + abc[1].latency_ms + abc[2].latency_ms,
    )
    return [
        Route.of(
            (
                RouteSegment(SegmentKind.SOURCE, source_owner, a),
                RouteSegment(SegmentKind.BACKBONE, NATIONAL_OWNER, b),
                RouteSegment(SegmentKind.DESTINATION, destination_owner, c),
            )
        )
        for a, b, c in best
    ]
