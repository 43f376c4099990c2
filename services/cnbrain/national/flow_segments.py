"""The routes of a waiting request's flows and of its continuous bandwidth, each segment asked
of its owner.

A flow runs between one of its ends and a candidate site. An end is a site (a dataset's
source, a delivery's destination), a province (entered at its first access node: a
delivery to users, serving), or the request's own access node (its continuous bandwidth and
latency bound). Each region that owns a part of those routes is asked once, for all its
parts, in parallel under the candidate deadline (`GetSiteSegments`): a site's segments from
its province's gateway, an access node's to its gateway, and, inside one province, the
local paths from a site or an access node to a candidate. The national brain computes the
backbone between the gateways on its own links; `routing.composed` combines them.

Every owner leaves out its links with nothing free now (`MIN_FREE_MBPS`): a link its
operator reported down, or one full now. So a flow is routed around a link its owner has
down, where a route on the national brain's copy of the map would cross it. A region that
does not answer, or answers with a path that does not join the ends asked or crosses a link
it does not own, gives nothing: every route that needs one of its segments is missing, and
the candidate has no option with that flow (`Asked.unheard` names those regions).
"""

import asyncio
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from cnbrain.domain.flows import Endpoint
from cnbrain.domain.request import PlacementRequest
from cnbrain.federation.codec import WireError, graph_path
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.live_map import LiveMap
from cnbrain.national.regions import RegionDirectory
from cnbrain.netmap.arrays import MapArrays
from cnbrain.routing.composed import OwnerRoutes, OwnerSegments
from cnbrain.routing.paths import GraphPath
from cnbrain.v1 import common_pb2, regional_pb2

log = logging.getLogger("cnbrain.national")

MIN_FREE_MBPS = 1
"""What a link must have free now to be on a flow's segment: something."""

MAX_ASKS = 64
"""Sites, pairs, access nodes and access sites one GetSiteSegments call names (each), as a
region takes them."""


@dataclass(slots=True)
class SegmentAsks:
    """What one region is asked, each once: site ids, (site, site) pairs, access nodes, and
    (access node, site) pairs."""

    sites: dict[str, None] = field(default_factory=dict)
    pairs: dict[tuple[str, str], None] = field(default_factory=dict)
    nodes: dict[str, None] = field(default_factory=dict)
    node_sites: dict[tuple[str, str], None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Asked:
    """The routes of the owners' answers, and the regions that gave none."""

    routes: OwnerRoutes
    unheard: frozenset[str]


def routed_from_access(request: PlacementRequest) -> bool:
    """Whether the route from `request`'s access node to its site matters: it holds
    continuous bandwidth on it, or bounds its latency."""
    constraints = request.constraints
    return constraints.min_bandwidth_gbps > 0 or constraints.max_latency_ms is not None


def flow_ends(request: PlacementRequest, arrays: MapArrays) -> tuple[list[str], list[str]]:
    """The ends of `request`'s flows: site ids, and access nodes (a province's first; the
    request's own when the route from it matters, `routed_from_access`)."""
    cmap = arrays.map
    sites: list[str] = []
    nodes: list[str] = []
    if routed_from_access(request):
        nodes.append(request.access_node or cmap.provinces[request.source_province].access_nodes[0])
    flows = request.flows
    ends: list[Endpoint] = []
    if flows is not None:
        ends += [s.source for s in flows.staging]
        ends += [d.destination for d in flows.delivery]
        if flows.serving is not None:
            ends += [Endpoint(province=p) for p in flows.serving.provinces]
    for end in ends:
        if end.site is not None:
            sites.append(end.site)
        elif end.province is not None:
            nodes.append(cmap.provinces[end.province].access_nodes[0])
    return list(dict.fromkeys(sites)), list(dict.fromkeys(nodes))


def wanted_of(
    site_ends: Sequence[str], node_ends: Sequence[str], candidates: Sequence[int], arrays: MapArrays
) -> dict[str, SegmentAsks]:
    """By region, what it is asked for the routes between the ends and the candidates."""
    cmap = arrays.map
    wanted: dict[str, SegmentAsks] = {}

    def of(province: str) -> SegmentAsks:
        return wanted.setdefault(cmap.region_of(province), SegmentAsks())

    for candidate in candidates:
        target = cmap.sites[candidate]
        for site_id in site_ends:
            end = cmap.sites[cmap.site_index[site_id]]
            if end.id == target.id:
                continue
            if end.province == target.province:
                of(end.province).pairs[end.id, target.id] = None
            else:
                of(end.province).sites[end.id] = None
                of(target.province).sites[target.id] = None
        for node in node_ends:
            province = cmap.node_province[node]
            if province == target.province:
                of(province).node_sites[node, target.id] = None
            else:
                of(province).nodes[node] = None
                of(target.province).sites[target.id] = None
    return wanted


class FlowSegments:
    """The use case (module docstring)."""

    def __init__(self, *, live_map: LiveMap, directory: RegionDirectory, deadline_s: float) -> None:
        self._live_map = live_map
        self._directory = directory
        self._deadline_s = deadline_s

    async def __call__(self, request: PlacementRequest, candidates: Sequence[int]) -> Asked:
        """The routes between the ends of `request`'s flows and the sites `candidates`
        (indices), as their owners compute them."""
        engine = self._live_map.engine
        arrays = engine.arrays
        wanted = wanted_of(*flow_ends(request, arrays), candidates, arrays)
        answers = await asyncio.gather(
            *(self._ask(region_id, one, arrays) for region_id, one in wanted.items())
        )
        segments = OwnerSegments()
        unheard: set[str] = set()
        for region_id, answer in zip(wanted, answers, strict=True):
            if answer is None:
                unheard.add(region_id)
            else:
                segments = segments.merged(answer)
        snapshot, _ = await self._live_map.snapshot()
        blocked = frozenset(np.flatnonzero(snapshot.residual_mbps < MIN_FREE_MBPS).tolist())
        routes = OwnerRoutes(arrays.map, engine.router, segments, backbone_blocked=blocked)
        return Asked(routes, frozenset(unheard))

    async def _ask(
        self, region_id: str, one: SegmentAsks, arrays: MapArrays
    ) -> OwnerSegments | None:
        """`one` asked of region `region_id`, its answers checked (`read_segments`); None when it
        gives none."""
        region = self._directory.get(region_id)
        if region is None:
            log.info("region %s is not registered: no segments of its for flows", region_id)
            return None
        found = OwnerSegments()
        try:
            for sites, pairs, nodes, node_sites in _batches(one):
                answer = await region.site_segments(
                    sites,
                    pairs,
                    paths=1,
                    min_free_mbps=MIN_FREE_MBPS,
                    deadline_s=self._deadline_s,
                    access_nodes=nodes,
                    access_sites=node_sites,
                )
                found = found.merged(read_segments(answer, region_id, arrays))
        except PeerUnavailable as error:
            log.info("no segments for flows from region %s: %s", region_id, error)
            return None
        except WireError as wrong:
            log.warning("region %s answered segments for flows not valid: %s", region_id, wrong)
            return None
        return found


Batch = tuple[list[str], list[tuple[str, str]], list[str], list[tuple[str, str]]]


def _batches(one: SegmentAsks) -> Iterator[Batch]:
    """`one` in calls of at most `MAX_ASKS` of each kind."""
    sites, pairs, nodes = list(one.sites), list(one.pairs), list(one.nodes)
    node_sites = list(one.node_sites)
    longest = max(len(sites), len(pairs), len(nodes), len(node_sites))
    for lo in range(0, longest, MAX_ASKS):
        hi = lo + MAX_ASKS
        yield sites[lo:hi], pairs[lo:hi], nodes[lo:hi], node_sites[lo:hi]


def read_segments(
    answer: regional_pb2.GetSiteSegmentsResponse, region_id: str, arrays: MapArrays
) -> OwnerSegments:
    """`answer`'s paths, each checked: it joins the ends asked and crosses links of
    `region_id` only (WireError otherwise). An entry with an error, or naming a site or node
    this map does not know, gives nothing."""
    cmap = arrays.map
    index = cmap.site_index

    def paths(messages: Sequence[common_pb2.Path], start: str, end: str) -> list[GraphPath]:
        found = []
        for message in messages:
            path = graph_path(message, arrays=arrays, links=arrays.link_index)
            if (path.nodes[0], path.nodes[-1]) != (start, end):
                raise WireError(f"a path that does not join {start!r} and {end!r}")
            if any(cmap.links[j].owner != region_id for j in path.links):
                raise WireError(f"a path that crosses a link region {region_id!r} does not own")
            found.append(path)
        return found

    def gateway(site_id: str) -> str:
        return cmap.provinces[cmap.sites[index[site_id]].province].gateway

    nodes = cmap.node_province
    return OwnerSegments(
        sites={
            index[one.from_site_id]: paths(one.paths, gateway(one.from_site_id), one.from_site_id)
            for one in answer.sites
            if not one.error and one.from_site_id in index
        },
        pairs={
            (index[one.from_site_id], index[one.to_site_id]): paths(
                one.paths, one.from_site_id, one.to_site_id
            )
            for one in answer.pairs
            if not one.error and one.from_site_id in index and one.to_site_id in index
        },
        nodes={
            one.access_node: paths(
                one.paths, one.access_node, cmap.provinces[nodes[one.access_node]].gateway
            )
            for one in answer.access_nodes
            if not one.error and one.access_node in nodes
        },
        node_sites={
            (one.access_node, index[one.site_id]): paths(one.paths, one.access_node, one.site_id)
            for one in answer.access_sites
            if not one.error and one.access_node in nodes and one.site_id in index
        },
    )
