"""Routes between two sites, each segment computed by its owner (GetSiteRoutes).

Between sites of two provinces a route has three segments, as a route from an access node
has: the first site's region computes the paths from its province's gateway to the site
(`GetSiteSegments`), taken the other way; the national brain the backbone paths between the
two gateways, on its own links; the second site's region the paths from its province's
gateway to the site. The k lowest-latency combinations are the routes. Between sites of one
province, its region computes the local paths. Every region answers on its own links and
ledger, leaving out the links with less free bandwidth than asked; the national brain does
the same on the backbone.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cnbrain.domain.decision import SegmentKind
from cnbrain.domain.errors import Invalid
from cnbrain.federation.codec import graph_path, path_message
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.live_map import LiveMap
from cnbrain.national.regions import RegionDirectory
from cnbrain.netmap.arrays import IntArray
from cnbrain.routing.paths import GraphPath
from cnbrain.routing.router import combine
from cnbrain.v1 import common_pb2, national_pb2, regional_pb2

MAX_ROUTES = 8
"""Routes one call may ask for."""


@dataclass(frozen=True, slots=True)
class _Asked:
    """What one region answered: its segments by site, and its local paths by pair."""

    sites: dict[str, list[common_pb2.Path]]
    pairs: dict[tuple[str, str], list[common_pb2.Path]]


class SiteRoutes:
    """The use case (module docstring); owners are asked within `deadline_s`."""

    def __init__(self, *, live_map: LiveMap, directory: RegionDirectory, deadline_s: float) -> None:
        self._live_map = live_map
        self._directory = directory
        self._deadline_s = deadline_s

    async def __call__(
        self, from_site_id: str, to_site_id: str, *, k: int, min_free_mbps: int
    ) -> list[national_pb2.SiteRoute]:
        """The best routes, best first (none when no route has the free bandwidth). Raises
        Invalid naming an unknown site or a bound out of range, PeerUnavailable when an
        owner has not registered or does not answer, or answers for a site it does not own."""
        if not 1 <= k <= MAX_ROUTES:
            raise Invalid(f"must be 1 to {MAX_ROUTES}", field="routes")
        if min_free_mbps < 0:
            raise Invalid("must be at least 0", field="min_free_mbps")
        cmap = self._live_map.map
        ends = []
        for name, site_id in (("from_site_id", from_site_id), ("to_site_id", to_site_id)):
            if site_id not in cmap.site_index:
                raise Invalid(f"unknown site {site_id[:128]!r}", field=name)
            ends.append(cmap.site_index[site_id])
        first, second = ends
        if first == second:
            return [national_pb2.SiteRoute(segments=[], latency_ms=0.0)]
        src, dst = cmap.sites[first].province, cmap.sites[second].province
        src_owner, dst_owner = cmap.region_of(src), cmap.region_of(dst)
        if src == dst:
            asked = await self._ask(src_owner, [], [(from_site_id, to_site_id)], k, min_free_mbps)
            return [
                self._message(((SegmentKind.LOCAL, src_owner, path),))
                for path in asked.pairs[from_site_id, to_site_id]
            ]
        answers = {
            owner: await self._ask(
                owner,
                [s for s, o in ((from_site_id, src_owner), (to_site_id, dst_owner)) if o == owner],
                [],
                k,
                min_free_mbps,
            )
            for owner in dict.fromkeys((src_owner, dst_owner))
        }
        snapshot, _ = await self._live_map.snapshot()
        return self._composed(
            snapshot.residual_mbps,
            answers[src_owner].sites[from_site_id],
            answers[dst_owner].sites[to_site_id],
            (first, second),
            (src_owner, dst_owner),
            k,
            min_free_mbps,
        )

    async def _ask(
        self,
        owner: str,
        site_ids: Sequence[str],
        pairs: Sequence[tuple[str, str]],
        k: int,
        min_free_mbps: int,
    ) -> _Asked:
        region = self._directory.get(owner)
        if region is None:
            raise PeerUnavailable(f"region {owner!r}", "not registered")
        answer = await region.site_segments(
            site_ids, pairs, paths=k, min_free_mbps=min_free_mbps, deadline_s=self._deadline_s
        )
        return _Asked(
            {one.from_site_id: _paths(owner, one) for one in answer.sites},
            {(one.from_site_id, one.to_site_id): _paths(owner, one) for one in answer.pairs},
        )

    def _composed(
        self,
        residual_mbps: IntArray,
        up: Sequence[common_pb2.Path],
        down: Sequence[common_pb2.Path],
        sites: tuple[int, int],
        owners: tuple[str, str],
        k: int,
        min_free_mbps: int,
    ) -> list[national_pb2.SiteRoute]:
        """The k best routes of the first site's segments (taken from the site to its
        gateway), the backbone (links with less than `min_free_mbps` of `residual_mbps` left
        out) and the second site's segments; each segment as its computer sent it."""
        engine = self._live_map.engine
        arrays, cmap = engine.arrays, engine.map
        blocked = frozenset(np.flatnonzero(residual_mbps < min_free_mbps).tolist())
        wire: dict[int, common_pb2.Path] = {}

        def read(message: common_pb2.Path) -> GraphPath:
            return graph_path(message, arrays=arrays, links=arrays.link_index)

        first = [read(p).reversed() for p in up]
        last = [read(p) for p in down]
        gateways = [cmap.provinces[cmap.sites[s].province].gateway for s in sites]
        middle = engine.router.backbone_paths(*gateways, k=k, blocked=blocked)
        for paths, messages in (
            (first, [_reversed(p) for p in up]),
            (last, list(down)),
            (middle, [path_message(p, arrays=arrays, residual_mbps=residual_mbps) for p in middle]),
        ):
            for path, message in zip(paths, messages, strict=True):
                wire[id(path)] = message
        routes = combine(*owners, first, middle, last, k=k)
        return [
            self._message(tuple((s.kind, s.owner, wire[id(s.path)]) for s in route.segments))
            for route in routes
        ]

    @staticmethod
    def _message(
        segments: Sequence[tuple[SegmentKind, str, common_pb2.Path]],
    ) -> national_pb2.SiteRoute:
        return national_pb2.SiteRoute(
            segments=[
                national_pb2.RouteSegment(kind=kind.value, owner=owner, path=path)
                for kind, owner, path in segments
            ],
            latency_ms=sum(path.latency_ms for _, _, path in segments),
        )


def _paths(owner: str, answer: regional_pb2.SitePaths) -> list[common_pb2.Path]:
    if answer.error:
        raise PeerUnavailable(f"region {owner!r}", "no answer for its site", answer.error)
    return list(answer.paths)


def _reversed(message: common_pb2.Path) -> common_pb2.Path:
    return common_pb2.Path(
        nodes=list(reversed(message.nodes)),
        link_ids=list(reversed(message.link_ids)),
        free_mbps=list(reversed(message.free_mbps)),
        latency_ms=message.latency_ms,
    )
