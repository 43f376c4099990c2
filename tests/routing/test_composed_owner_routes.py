"""Routes composed of the segments their owners answered (`routing.composed`): with every
owner answering what its own router computes, they are the routes of one router over the
whole map; a segment no owner gave leaves exactly the routes that need it without one."""

import itertools

import pytest

from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.synthetic import synthetic_document
from cnbrain.routing.composed import OwnerRoutes, OwnerSegments
from cnbrain.routing.paths import GraphPath
from cnbrain.routing.router import Route, SegmentRouter


def _answered(router: SegmentRouter, cmap: ComputeNetworkMap, k: int) -> OwnerSegments:
    """What the owners answer for every site, pair of sites of a province, access node, and
    access node with a site of its province: their own router's segments."""
    sites = range(len(cmap.sites))
    nodes = [node for p in cmap.provinces.values() for node in p.access_nodes]
    province = cmap.node_province

    def local(routes: list[Route]) -> list[GraphPath]:
        return [segment.path for route in routes for segment in route.segments]

    return OwnerSegments(
        sites={s: router.destination_paths(s, k=k, blocked=frozenset()) for s in sites},
        pairs={
            (a, b): local(router.site_routes(from_site=a, to_site=b, k=k))
            for a, b in itertools.permutations(sites, 2)
            if cmap.sites[a].province == cmap.sites[b].province
        },
        nodes={node: router.source_paths(node, k=k, blocked=frozenset()) for node in nodes},
        node_sites={
            (node, s): local(router.routes(access_node=node, sites=[s], k=k)[0])
            for node in nodes
            for s in sites
            if province[node] == cmap.sites[s].province
        },
    )


def _shape(routes: list[Route]) -> list[tuple[object, ...]]:
    return [
        (
            route.links,
            round(route.latency_ms, 9),
            tuple((s.kind, s.owner, s.path.nodes) for s in route.segments),
        )
        for route in routes
    ]


@pytest.mark.parametrize("k", [1, 3])
def test_owners_segments_give_the_routes_of_one_router_over_the_whole_map(k: int) -> None:
    cmap = ComputeNetworkMap.from_document(
        synthetic_document(provinces=4, sites_per_province=6, seed=5)
    )
    router = SegmentRouter(MapArrays.build(cmap))
    owned = OwnerRoutes(cmap, router, _answered(router, cmap, k))
    sites = range(len(cmap.sites))
    for a, b in itertools.product(sites, sites):
        assert _shape(owned.site_routes(from_site=a, to_site=b, k=k)) == _shape(
            router.site_routes(from_site=a, to_site=b, k=k)
        ), (a, b)
    for province in cmap.provinces.values():
        for node in province.access_nodes:
            assert [_shape(r) for r in owned.routes(access_node=node, sites=sites, k=k)] == [
                _shape(r) for r in router.routes(access_node=node, sites=sites, k=k)
            ], node


def test_a_segment_no_owner_gave_leaves_only_the_routes_that_need_it_without_one(
    tiny_map: ComputeNetworkMap,
) -> None:
    router = SegmentRouter(MapArrays.build(tiny_map))
    every = _answered(router, tiny_map, 1)
    west = {
        s for s, site in enumerate(tiny_map.sites) if tiny_map.region_of(site.province) == "west"
    }
    silent_west = OwnerSegments(
        sites={s: p for s, p in every.sites.items() if s not in west},
        pairs={pair: p for pair, p in every.pairs.items() if pair[0] not in west},
        nodes={
            n: p
            for n, p in every.nodes.items()
            if tiny_map.region_of(tiny_map.node_province[n]) != "west"
        },
        node_sites={pair: p for pair, p in every.node_sites.items() if pair[1] not in west},
    )
    owned = OwnerRoutes(tiny_map, router, silent_west)
    index = tiny_map.site_index
    assert owned.site_routes(from_site=index["AA-dc"], to_site=index["CC-hub"], k=1) == []
    assert owned.site_routes(from_site=index["CC-hub"], to_site=index["AA-dc"], k=1) == []
    assert _shape(owned.site_routes(from_site=index["AA-dc"], to_site=index["AA-idle"], k=1)) == (
        _shape(router.site_routes(from_site=index["AA-dc"], to_site=index["AA-idle"], k=1))
    )
    (to_hub, to_dc) = owned.routes(
        access_node="AA-acc", sites=[index["CC-hub"], index["AA-dc"]], k=1
    )
    assert to_hub == []
    assert _shape(to_dc) == _shape(
        router.routes(access_node="AA-acc", sites=[index["AA-dc"]], k=1)[0]
    )


def test_the_latency_bound_and_the_links_blocked_hold(
    tiny_map: ComputeNetworkMap,
) -> None:
    router = SegmentRouter(MapArrays.build(tiny_map))
    index = tiny_map.site_index
    dc, hub = index["AA-dc"], index["CC-hub"]
    owned = OwnerRoutes(tiny_map, router, _answered(router, tiny_map, 1))
    assert owned.site_routes(from_site=dc, to_site=hub, k=1, max_latency_ms=6.0) == []
    assert len(owned.site_routes(from_site=dc, to_site=hub, k=1, max_latency_ms=6.5)) == 1
    backbone = int(tiny_map.graph["AA-gw"]["BB-gw"]["idx"])
    around = OwnerRoutes(
        tiny_map, router, _answered(router, tiny_map, 1), backbone_blocked=frozenset({backbone})
    )
    (route,) = around.site_routes(from_site=dc, to_site=hub, k=1)
    assert route.segments[1].path.nodes == ("AA-gw", "CC-gw")
    assert route.latency_ms == pytest.approx(11.4)

    # Links blocked by the caller: a route whose owners' segments cross one is left out,
    # and the backbone goes around one.
    (best,) = owned.site_routes(from_site=dc, to_site=hub, k=1)
    first = best.segments[0].path.links[0]
    assert owned.site_routes(from_site=dc, to_site=hub, k=1, blocked=frozenset({first})) == []
    # The local path from the access node to the site ends on that link too.
    (local,) = owned.routes(access_node="AA-acc", sites=[dc], k=1)[0]
    assert first in local.links
    assert owned.routes(access_node="AA-acc", sites=[dc], k=1, blocked=frozenset({first})) == [[]]
    (route,) = owned.site_routes(from_site=dc, to_site=hub, k=1, blocked=frozenset({backbone}))
    assert route.segments[1].path.nodes == ("AA-gw", "CC-gw")
