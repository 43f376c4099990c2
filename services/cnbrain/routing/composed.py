"""Routes assembled from segments that their owners computed elsewhere.

The national brain places a cross-region request with `ComposedRouter`: the source segments
come from the source region's brain, each candidate site's destination segments from the
brain that owns the site, and the backbone segments from the national brain's own graph.

It plans a waiting request's flows with `OwnerRoutes`: a route between a site or an access
node and a site has the segments `SegmentRouter` gives it. Inside one province it is one
`local` path (the owner's path between the two); otherwise the segment from the first end to
its province's gateway (a site's segment from the gateway, taken the other way; an access
node's to the gateway), a backbone path between the two gateways, and the segment from the
second site's gateway to it, the k best combined as `SegmentRouter` does. A segment its
owner did not give (it did not answer, or no path of its avoids its blocked links) leaves
the end without a route.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cnbrain.domain.decision import SegmentKind
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.routing.latency_bounds import LatencyBounds
from cnbrain.routing.paths import Blocked, GraphPath
from cnbrain.routing.router import NOTHING_BLOCKED, Route, RouteSegment, SegmentRouter, combine


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


@dataclass(frozen=True, slots=True)
class OwnerSegments:
    """What the owners answered, best first: `sites`, a site's paths from its province's
    gateway to it; `pairs`, the paths from a site to another of its province; `nodes`, an
    access node's paths to its province's gateway; `node_sites`, the paths from an access
    node to a site of its province. Sites by index."""

    sites: Mapping[int, Sequence[GraphPath]] = field(default_factory=dict)
    pairs: Mapping[tuple[int, int], Sequence[GraphPath]] = field(default_factory=dict)
    nodes: Mapping[str, Sequence[GraphPath]] = field(default_factory=dict)
    node_sites: Mapping[tuple[str, int], Sequence[GraphPath]] = field(default_factory=dict)

    def merged(self, other: "OwnerSegments") -> "OwnerSegments":
        """These segments and `other`'s (`other`'s where both have one)."""
        return OwnerSegments(
            {**self.sites, **other.sites},
            {**self.pairs, **other.pairs},
            {**self.nodes, **other.nodes},
            {**self.node_sites, **other.node_sites},
        )


class OwnerRoutes:
    """Routes of the owners' `segments` (module docstring), the backbone computed on
    `router`'s graph avoiding `backbone_blocked`. Answers as `SegmentRouter.site_routes` and
    `SegmentRouter.routes` do: the backbone is computed around the links `blocked` too, and
    a route whose owners' segments cross one of them is left out."""

    def __init__(
        self,
        cmap: ComputeNetworkMap,
        router: SegmentRouter,
        segments: OwnerSegments,
        *,
        backbone_blocked: Blocked = NOTHING_BLOCKED,
    ) -> None:
        self._map = cmap
        self._router = router
        self._segments = segments
        self._blocked = backbone_blocked

    def site_routes(
        self,
        *,
        from_site: int,
        to_site: int,
        k: int,
        blocked: Blocked = NOTHING_BLOCKED,
        max_latency_ms: float = math.inf,
    ) -> list[Route]:
        """The up to k best routes from site `from_site` to site `to_site`, best first, within
        `max_latency_ms` (one empty route for the same site)."""
        if from_site == to_site:
            return [Route.of(())]
        cmap = self._map
        src, dst = cmap.sites[from_site].province, cmap.sites[to_site].province
        if src == dst:
            local = self._segments.pairs.get((from_site, to_site), ())
            return self._local(src, local, k, blocked, max_latency_ms)
        first = [p.reversed() for p in self._segments.sites.get(from_site, ())]
        return self._across(src, dst, first, to_site, k, blocked, max_latency_ms)

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
        cmap = self._map
        src = cmap.node_province[access_node]
        out: list[list[Route]] = []
        for site in sites:
            dst = cmap.sites[site].province
            if src == dst:
                local = self._segments.node_sites.get((access_node, site), ())
                out.append(self._local(src, local, k, blocked, max_latency_ms))
            else:
                first = list(self._segments.nodes.get(access_node, ()))
                out.append(self._across(src, dst, first, site, k, blocked, max_latency_ms))
        return out

    def _local(
        self,
        province: str,
        paths: Sequence[GraphPath],
        k: int,
        blocked: Blocked,
        max_latency_ms: float,
    ) -> list[Route]:
        owner = self._map.region_of(province)
        routes = [Route.of((RouteSegment(SegmentKind.LOCAL, owner, p),)) for p in paths[:k]]
        return _within(routes, blocked, max_latency_ms)

    def _across(
        self,
        src: str,
        dst: str,
        first: Sequence[GraphPath],
        site: int,
        k: int,
        blocked: Blocked,
        max_latency_ms: float,
    ) -> list[Route]:
        last = self._segments.sites.get(site, ())
        if not first or not last:
            return []
        cmap = self._map
        middle = self._router.backbone_paths(
            cmap.provinces[src].gateway,
            cmap.provinces[dst].gateway,
            k=k,
            blocked=self._blocked | blocked,
        )
        routes = combine(cmap.region_of(src), cmap.region_of(dst), first, middle, last, k=k)
        return _within(routes, blocked, max_latency_ms)


def _within(routes: Sequence[Route], blocked: Blocked, max_latency_ms: float) -> list[Route]:
    """`routes` that cross no link of `blocked` and are within `max_latency_ms`."""
    return [r for r in routes if r.latency_ms <= max_latency_ms and blocked.isdisjoint(r.links)]
