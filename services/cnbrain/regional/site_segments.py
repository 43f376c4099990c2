"""A region's parts of routes between sites and of flows' routes (GetSiteSegments), on its
own links and one snapshot of its ledger: a site's paths from its province's gateway, the
paths between two sites of one province, an access node's paths to its gateway, and the
paths from an access node to a site of its province; each avoiding the links with less free
than asked. A site or node this region does not own, or two ends in two provinces, get an
error instead of paths.
"""

from collections.abc import Sequence

from cnbrain.federation.codec import path_message
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.placement.engine import PlacementEngine
from cnbrain.routing.paths import Blocked, GraphPath
from cnbrain.routing.router import Route
from cnbrain.v1 import common_pb2, regional_pb2

MAX_ASKS = 64
"""Sites, pairs of sites, access nodes, and access nodes with sites, one call may name
(each)."""

MAX_PATHS = 8
"""Paths per site, pair or access node of a call."""

MAX_ECHO = 128
"""Characters of an unknown name echoed back."""


class SiteSegments:
    """Answers one GetSiteSegments call of region `region_id` on `snapshot`: `paths` paths
    each, avoiding the links `blocked`."""

    def __init__(
        self,
        *,
        engine: PlacementEngine,
        snapshot: Snapshot,
        region_id: str,
        paths: int,
        blocked: Blocked,
    ) -> None:
        self._engine = engine
        self._snapshot = snapshot
        self._region_id = region_id
        self._k = paths
        self._blocked = blocked

    def answer(
        self, request: regional_pb2.GetSiteSegmentsRequest
    ) -> regional_pb2.GetSiteSegmentsResponse:
        """The answer to `request`, one entry per site, pair, node and node with site, in
        order."""
        router = self._engine.router
        k, blocked = self._k, self._blocked
        sites = []
        for site_id in request.site_ids:
            site, error = self._own_site(site_id)
            paths = [] if site is None else router.destination_paths(site, k=k, blocked=blocked)
            sites.append(
                regional_pb2.SitePaths(from_site_id=site_id, paths=self._wire(paths), error=error)
            )
        pairs = []
        for pair in request.pairs:
            first, error = self._own_site(pair.from_site_id)
            second, second_error = self._own_site(pair.to_site_id)
            error = error or second_error
            paths = []
            if first is not None and second is not None:
                error = self._apart(self._engine.map.sites[first].province, second)
                if not error:
                    paths = _local(
                        router.site_routes(from_site=first, to_site=second, k=k, blocked=blocked)
                    )
            pairs.append(
                regional_pb2.SitePaths(
                    from_site_id=pair.from_site_id,
                    to_site_id=pair.to_site_id,
                    paths=self._wire(paths),
                    error=error,
                )
            )
        nodes = []
        for node in request.access_nodes:
            province, error = self._own_node(node)
            paths = [] if province is None else router.source_paths(node, k=k, blocked=blocked)
            nodes.append(
                regional_pb2.AccessPaths(access_node=node, paths=self._wire(paths), error=error)
            )
        node_sites = []
        for one in request.access_sites:
            province, error = self._own_node(one.access_node)
            site, site_error = self._own_site(one.site_id)
            error = error or site_error
            paths = []
            if province is not None and site is not None:
                error = self._apart(province, site)
                if not error:
                    (routes,) = router.routes(
                        access_node=one.access_node, sites=[site], k=k, blocked=blocked
                    )
                    paths = _local(routes)
            node_sites.append(
                regional_pb2.AccessPaths(
                    access_node=one.access_node,
                    site_id=one.site_id,
                    paths=self._wire(paths),
                    error=error,
                )
            )
        return regional_pb2.GetSiteSegmentsResponse(
            region_id=self._region_id,
            sites=sites,
            pairs=pairs,
            access_nodes=nodes,
            access_sites=node_sites,
        )

    def _own_site(self, site_id: str) -> tuple[int | None, str]:
        """The index of site `site_id` when this region owns it, else None and why not."""
        cmap = self._engine.map
        site = cmap.site_index.get(site_id)
        if site is None:
            return None, f"unknown site {site_id[:MAX_ECHO]!r}"
        if cmap.region_of(cmap.sites[site].province) != self._region_id:
            return None, f"site {site_id!r} is not in region {self._region_id!r}"
        return site, ""

    def _own_node(self, node: str) -> tuple[str | None, str]:
        """The province of access node `node` when this region owns it, else None and why
        not."""
        cmap = self._engine.map
        province = cmap.node_province.get(node)
        if province is None or node not in cmap.provinces[province].access_nodes:
            return None, f"unknown access node {node[:MAX_ECHO]!r}"
        if cmap.region_of(province) != self._region_id:
            return None, f"access node {node!r} is not in region {self._region_id!r}"
        return province, ""

    def _apart(self, province: str, site: int) -> str:
        """Why a local path from `province` cannot reach `site` ("" when it can)."""
        if self._engine.map.sites[site].province != province:
            return "the two ends are not in one province"
        return ""

    def _wire(self, paths: Sequence[GraphPath]) -> list[common_pb2.Path]:
        residual = self._snapshot.residual_mbps
        return [path_message(p, arrays=self._engine.arrays, residual_mbps=residual) for p in paths]


def _local(routes: Sequence[Route]) -> list[GraphPath]:
    """The paths of routes inside one province (one segment each)."""
    return [segment.path for route in routes for segment in route.segments]
