"""Routes between two sites, for tenants planning where their data moves and operators.

A standalone brain computes them on its own map: the k lowest-latency routes in three
segments (the first site's province to its gateway, the backbone, the second site's
province; one local segment inside one province: `SegmentRouter.site_routes`), leaving out
the routes with a link of less free bandwidth than asked on its snapshot. A federated brain
asks the national brain, which asks each segment's owner for its part (docs/federation.md,
"Routes between sites").
"""

from cnbrain.domain.errors import Invalid
from cnbrain.federation.live_map import LiveMap
from cnbrain.netmap.arrays import IntArray, MapArrays
from cnbrain.regional.schemas import RouteSegmentView, SiteRoutes, SiteRouteView
from cnbrain.regional.use_cases.ports import NationalClient
from cnbrain.routing.router import Route

MAX_ROUTES = 8
"""Routes one call may ask for."""


class ReadSiteRoutes:
    """The use case (module docstring); `national` is None for a standalone brain."""

    def __init__(self, *, live_map: LiveMap, national: NationalClient | None) -> None:
        self._live_map = live_map
        self._national = national

    async def __call__(
        self, from_site: str, to_site: str, *, k: int, min_free_mbps: int
    ) -> SiteRoutes:
        """Raises Invalid naming an unknown site or a bound out of range; in a federation,
        PeerUnavailable when the national brain or an owner cannot be reached."""
        if not 1 <= k <= MAX_ROUTES:
            raise Invalid(f"must be 1 to {MAX_ROUTES}", field="routes")
        cmap = self._live_map.map
        for name, site in (("from_site", from_site), ("to_site", to_site)):
            if site not in cmap.site_index:
                raise Invalid(f"unknown site {site[:128]!r}", field=name)
        if self._national is not None:
            routes = await self._national.site_routes(
                from_site, to_site, k=k, min_free_mbps=min_free_mbps
            )
            return SiteRoutes(from_site=from_site, to_site=to_site, routes=routes)
        engine = self._live_map.engine
        snapshot, _ = await self._live_map.snapshot()
        residual = snapshot.residual_mbps
        found = engine.router.site_routes(
            from_site=cmap.site_index[from_site], to_site=cmap.site_index[to_site], k=k
        )
        return SiteRoutes(
            from_site=from_site,
            to_site=to_site,
            routes=[
                route_view(route, engine.arrays, residual)
                for route in found
                if all(residual[link] >= min_free_mbps for link in route.links)
            ],
        )


def route_view(route: Route, arrays: MapArrays, residual_mbps: IntArray) -> SiteRouteView:
    """`route` with the free bandwidth of its links in `residual_mbps`."""
    links = arrays.map.links
    segments = [
        RouteSegmentView(
            kind=segment.kind.value,
            owner=segment.owner,
            latency_ms=segment.path.latency_ms,
            nodes=list(segment.path.nodes),
            links=[links[j].id for j in segment.path.links],
            free_gbps=least_gbps([int(residual_mbps[j]) for j in segment.path.links]),
        )
        for segment in route.segments
    ]
    return SiteRouteView(
        latency_ms=route.latency_ms,
        free_gbps=least_gbps([int(residual_mbps[j]) for j in route.links]),
        segments=segments,
    )


def least_gbps(free_mbps: list[int]) -> float | None:
    """The least of `free_mbps`, in Gbps; None for no link."""
    return min(free_mbps) / 1000 if free_mbps else None
