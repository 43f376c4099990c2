"""Three-segment routing, k shortest feasible paths, latency lower bounds and SRv6 SIDs.

Expected numbers come from conftest's tiny map. From AA-acc:
- AA-dc / AA-idle: AA-acc -> AA-agg1 (0.6) -> site (0.2) = 0.8 ms;
- BB sites: AA-acc -> AA-gw (0.3) + AA-gw -> BB-gw (2) + BB-gw -> BB-agg1 (0.5) -> site (0.2) = 3.0;
- CC-hub: 0.3 + AA-gw -> BB-gw -> CC-gw (5) + CC-gw -> CC-agg1 (0.5) -> CC-hub (0.2) = 6.0,
  or 0.3 + 10 + 0.7 = 11.0 over the direct AA-gw -- CC-gw backbone link.
"""

import ipaddress
import itertools
import math

import networkx as nx
import numpy as np
import pytest

from cnbrain.domain.decision import SegmentKind
from cnbrain.domain.enums import LinkLayer, NodeRole
from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.synthetic import synthetic_document
from cnbrain.routing import paths
from cnbrain.routing.paths import GraphPath, PathFinder
from cnbrain.routing.router import Route, SegmentRouter
from cnbrain.routing.srv6 import SidPlan

CORE_LAYERS = {LinkLayer.ACCESS, LinkLayer.PROVINCE}


@pytest.fixture(scope="module")
def arrays(tiny_map: ComputeNetworkMap) -> MapArrays:
    return MapArrays.build(tiny_map)


@pytest.fixture
def router(arrays: MapArrays) -> SegmentRouter:
    return SegmentRouter(arrays)


def link_idx(cmap: ComputeNetworkMap, a: str, b: str) -> int:
    return int(cmap.graph[a][b]["idx"])


def site_links(cmap: ComputeNetworkMap, site_id: str) -> frozenset[int]:
    return frozenset(int(d["idx"]) for _, _, d in cmap.graph.edges(site_id, data=True))


def one_site(
    router: SegmentRouter,
    cmap: ComputeNetworkMap,
    site_id: str,
    *,
    k: int,
    access_node: str = "AA-acc",
    blocked: frozenset[int] = frozenset(),
    max_latency_ms: float = math.inf,
) -> list[Route]:
    (routes,) = router.routes(
        access_node=access_node,
        sites=[cmap.site_index[site_id]],
        k=k,
        blocked=blocked,
        max_latency_ms=max_latency_ms,
    )
    return routes


def route_nodes(route: Route) -> list[str]:
    nodes: list[str] = []
    for seg in route.segments:
        for node in seg.path.nodes:
            if not nodes or nodes[-1] != node:
                nodes.append(node)
    return nodes


def assert_well_formed(cmap: ComputeNetworkMap, route: Route, access: str, site_id: str) -> None:
    """Segments chain up, links match the nodes they join, latencies add up, and only the last
    node is a site."""
    segs = route.segments
    assert segs[0].path.nodes[0] == access
    assert segs[-1].path.nodes[-1] == site_id
    for before, after in itertools.pairwise(segs):
        assert before.path.nodes[-1] == after.path.nodes[0]
    for seg in segs:
        p = seg.path
        assert len(p.links) == len(p.nodes) - 1
        assert len(set(p.nodes)) == len(p.nodes)
        for (a, b), link in zip(itertools.pairwise(p.nodes), p.links, strict=True):
            assert link_idx(cmap, a, b) == link
        assert p.link_array.tolist() == list(p.links)
        assert p.latency_ms == pytest.approx(sum(cmap.links[i].latency_ms for i in p.links))
    nodes = route_nodes(route)
    assert len(set(nodes)) == len(nodes), "a route must be a simple path"
    assert [n for n in nodes if n in cmap.site_index] == [site_id]
    assert route.links == tuple(i for s in segs for i in s.path.links)
    assert route.link_array.tolist() == list(route.links)
    assert route.latency_ms == pytest.approx(sum(s.path.latency_ms for s in segs))


def transit_graph(cmap: ComputeNetworkMap, site_id: str) -> "nx.Graph[str]":
    """The full map graph with every site but `site_id` removed: sites are not transit."""
    g = cmap.graph.copy()
    g.remove_nodes_from([s.id for s in cmap.sites if s.id != site_id])
    return g


def k_best_latencies(cmap: ComputeNetworkMap, access: str, site_id: str, k: int) -> list[float]:
    g = transit_graph(cmap, site_id)
    gen = nx.shortest_simple_paths(g, access, site_id, weight="latency_ms")
    return [nx.path_weight(g, p, weight="latency_ms") for p in itertools.islice(gen, k)]


# --- routes on the tiny map --------------------------------------------------------------


@pytest.mark.parametrize("site_id", ["AA-dc", "AA-idle"])
def test_same_province_route_is_one_local_segment(
    router: SegmentRouter, tiny_map: ComputeNetworkMap, site_id: str
) -> None:
    routes = one_site(router, tiny_map, site_id, k=1)
    assert len(routes) == 1
    (route,) = routes
    assert len(route.segments) == 1
    seg = route.segments[0]
    assert seg.kind is SegmentKind.LOCAL
    assert seg.owner == "east"
    assert seg.path.nodes == ("AA-acc", "AA-agg1", site_id)
    assert route.latency_ms == pytest.approx(0.8)
    assert_well_formed(tiny_map, route, "AA-acc", site_id)
    for link in route.links:
        assert tiny_map.links[link].layer in CORE_LAYERS
        assert tiny_map.node_province[tiny_map.links[link].a] == "AA"


def test_cross_region_route_has_three_owned_segments(
    router: SegmentRouter, tiny_map: ComputeNetworkMap
) -> None:
    (route,) = one_site(router, tiny_map, "CC-hub", k=1)
    assert [s.kind for s in route.segments] == [
        SegmentKind.SOURCE,
        SegmentKind.BACKBONE,
        SegmentKind.DESTINATION,
    ]
    assert [s.owner for s in route.segments] == ["east", NATIONAL_OWNER, "west"]
    source, backbone, destination = route.segments
    assert source.path.nodes == ("AA-acc", "AA-gw")
    assert backbone.path.nodes == ("AA-gw", "BB-gw", "CC-gw")
    assert backbone.path.latency_ms == pytest.approx(5.0)
    assert link_idx(tiny_map, "AA-gw", "CC-gw") not in route.links
    assert destination.path.nodes == ("CC-gw", "CC-agg1", "CC-hub")
    assert route.latency_ms == pytest.approx(6.0)
    assert route.latency_ms == pytest.approx(sum(s.path.latency_ms for s in route.segments))
    assert_well_formed(tiny_map, route, "AA-acc", "CC-hub")

    for seg in route.segments:
        for link in seg.path.links:
            layer = tiny_map.links[link].layer
            if seg.kind is SegmentKind.BACKBONE:
                assert layer is LinkLayer.BACKBONE
            else:
                assert layer in CORE_LAYERS
    src_provinces = {tiny_map.node_province[n] for n in source.path.nodes}
    dst_provinces = {tiny_map.node_province[n] for n in destination.path.nodes}
    assert src_provinces == {"AA"}
    assert dst_provinces == {"CC"}


def test_route_to_same_region_other_province(
    router: SegmentRouter, tiny_map: ComputeNetworkMap
) -> None:
    (route,) = one_site(router, tiny_map, "BB-hub", k=1)
    assert [s.owner for s in route.segments] == ["east", NATIONAL_OWNER, "east"]
    assert route.segments[1].path.nodes == ("AA-gw", "BB-gw")
    assert route.latency_ms == pytest.approx(3.0)
    assert_well_formed(tiny_map, route, "AA-acc", "BB-hub")


def test_routes_for_several_sites_follow_the_order_asked(
    router: SegmentRouter, tiny_map: ComputeNetworkMap
) -> None:
    order = [4, 0, 2]
    out = router.routes(access_node="AA-acc", sites=order, k=1)
    assert len(out) == 3
    for site, routes in zip(order, out, strict=True):
        assert routes[0].segments[-1].path.nodes[-1] == tiny_map.sites[site].id


@pytest.mark.parametrize(
    ("access", "site_id"),
    [("AA-acc", "CC-hub"), ("AA-acc", "AA-dc"), ("CC-acc", "BB-dc"), ("BB-acc", "BB-hub")],
)
def test_k_routes_sorted_distinct_and_match_networkx(
    router: SegmentRouter, tiny_map: ComputeNetworkMap, access: str, site_id: str
) -> None:
    routes = one_site(router, tiny_map, site_id, access_node=access, k=3)
    assert len(routes) == 3
    latencies = [r.latency_ms for r in routes]
    assert latencies == sorted(latencies)
    assert len({r.links for r in routes}) == 3
    for r in routes:
        assert_well_formed(tiny_map, r, access, site_id)
    # The three best simple paths of the whole map (sites not transit) are the three best routes.
    assert latencies == pytest.approx(k_best_latencies(tiny_map, access, site_id, 3))


def test_best_of_k3_is_the_shortest_path(
    router: SegmentRouter, tiny_map: ComputeNetworkMap
) -> None:
    routes = one_site(router, tiny_map, "CC-hub", k=3)
    g = transit_graph(tiny_map, "CC-hub")
    best = nx.shortest_path_length(g, "AA-acc", "CC-hub", weight="latency_ms")
    assert best == pytest.approx(6.0)
    assert routes[0].latency_ms == pytest.approx(best)
    # 6.0, then 6.4 twice (via CC-acc or CC-agg2 in the destination province)
    assert [r.latency_ms for r in routes] == pytest.approx([6.0, 6.4, 6.4])


def test_blocking_backbone_link_uses_direct_link(
    router: SegmentRouter, tiny_map: ComputeNetworkMap
) -> None:
    ab = link_idx(tiny_map, "AA-gw", "BB-gw")
    ac = link_idx(tiny_map, "AA-gw", "CC-gw")
    (route,) = one_site(router, tiny_map, "CC-hub", k=1, blocked=frozenset({ab}))
    assert route.segments[1].path.nodes == ("AA-gw", "CC-gw")
    assert route.segments[1].path.links == (ac,)
    assert ab not in route.links
    assert route.latency_ms == pytest.approx(11.0)


def test_blocking_every_attachment_gives_no_route(
    router: SegmentRouter, tiny_map: ComputeNetworkMap
) -> None:
    for site_id in ("AA-dc", "CC-hub", "BB-dc"):
        blocked = site_links(tiny_map, site_id)
        assert len(blocked) == 2
        assert one_site(router, tiny_map, site_id, k=3, blocked=blocked) == []
        # One attachment left open is enough.
        assert one_site(router, tiny_map, site_id, k=3, blocked=frozenset(sorted(blocked)[:1]))


def test_blocked_links_never_used(router: SegmentRouter, tiny_map: ComputeNetworkMap) -> None:
    blocked = frozenset(
        {
            link_idx(tiny_map, "AA-acc", "AA-gw"),
            link_idx(tiny_map, "CC-gw", "CC-agg1"),
        }
    )
    routes = one_site(router, tiny_map, "CC-hub", k=3, blocked=blocked)
    assert len(routes) == 3
    for r in routes:
        assert blocked.isdisjoint(r.links)
        assert_well_formed(tiny_map, r, "AA-acc", "CC-hub")
    g = transit_graph(tiny_map, "CC-hub")
    g.remove_edges_from([(u, v) for u, v, d in g.edges(data=True) if d["idx"] in blocked])
    gen = nx.shortest_simple_paths(g, "AA-acc", "CC-hub", weight="latency_ms")
    expected = [nx.path_weight(g, p, weight="latency_ms") for p in itertools.islice(gen, 3)]
    assert [r.latency_ms for r in routes] == pytest.approx(expected)


def test_max_latency_filters_routes(router: SegmentRouter, tiny_map: ComputeNetworkMap) -> None:
    assert len(one_site(router, tiny_map, "CC-hub", k=3)) == 3
    kept = one_site(router, tiny_map, "CC-hub", k=3, max_latency_ms=6.2)
    assert [r.latency_ms for r in kept] == pytest.approx([6.0])
    assert one_site(router, tiny_map, "CC-hub", k=3, max_latency_ms=5.9) == []
    ab = link_idx(tiny_map, "AA-gw", "BB-gw")
    assert (
        one_site(router, tiny_map, "CC-hub", k=1, blocked=frozenset({ab}), max_latency_ms=10.0)
        == []
    )
    for r in one_site(router, tiny_map, "AA-dc", k=3, max_latency_ms=1.0):
        assert r.latency_ms <= 1.0


def test_cache_never_returns_blocked_route(
    router: SegmentRouter, tiny_map: ComputeNetworkMap
) -> None:
    ab = link_idx(tiny_map, "AA-gw", "BB-gw")
    ac = link_idx(tiny_map, "AA-gw", "CC-gw")
    for k in (1, 3):
        first = one_site(router, tiny_map, "CC-hub", k=k)
        assert all(ab in r.links for r in first)
        blocked = one_site(router, tiny_map, "CC-hub", k=k, blocked=frozenset({ab}))
        assert len(blocked) == k
        assert all(ab not in r.links and ac in r.links for r in blocked)
        # Nothing blocked again: the unconstrained best routes come back.
        again = one_site(router, tiny_map, "CC-hub", k=k)
        assert [r.links for r in again] == [r.links for r in first]
    # A blocked set the cached routes avoid: same answer as unblocked.
    unrelated = frozenset({ac})
    assert [r.links for r in one_site(router, tiny_map, "CC-hub", k=1, blocked=unrelated)] == [
        r.links for r in one_site(router, tiny_map, "CC-hub", k=1)
    ]


def test_cache_with_local_route_and_blocked_attachment(
    router: SegmentRouter, tiny_map: ComputeNetworkMap
) -> None:
    (best,) = one_site(router, tiny_map, "AA-dc", k=1)
    used = frozenset({best.links[-1]})
    (other,) = one_site(router, tiny_map, "AA-dc", k=1, blocked=used)
    assert used.isdisjoint(other.links)
    assert other.latency_ms > best.latency_ms


# --- latency bounds --------------------------------------------------------------------


def test_bounds_tiny_map_by_hand(router: SegmentRouter) -> None:
    bounds = router.bounds.to_sites("AA-acc")
    np.testing.assert_allclose(bounds, [0.8, 0.8, 3.0, 3.0, 6.0], rtol=1e-12)
    assert not bounds.flags.writeable


def assert_bounds_exact(router: SegmentRouter, cmap: ComputeNetworkMap) -> None:
    sites = list(range(len(cmap.sites)))
    for province in cmap.provinces.values():
        for access in province.access_nodes:
            bounds = router.bounds.to_sites(access)
            assert bounds.shape == (len(sites),)
            best = router.routes(access_node=access, sites=sites, k=1)
            latencies = [r[0].latency_ms if r else math.inf for r in best]
            np.testing.assert_allclose(bounds, latencies, rtol=1e-12, atol=0)
            assert np.isfinite(bounds).all()


def test_bounds_equal_best_route_on_tiny_map(
    router: SegmentRouter, tiny_map: ComputeNetworkMap
) -> None:
    assert_bounds_exact(router, tiny_map)


def test_bounds_equal_best_route_on_synthetic_map() -> None:
    cmap = ComputeNetworkMap.from_document(
        synthetic_document(provinces=4, sites_per_province=12, seed=3)
    )
    router = SegmentRouter(MapArrays.build(cmap))
    assert len(cmap.sites) == 48
    assert_bounds_exact(router, cmap)


def test_bounds_on_single_province_map() -> None:
    cmap = ComputeNetworkMap.from_document(
        synthetic_document(provinces=1, sites_per_province=3, seed=0)
    )
    router = SegmentRouter(MapArrays.build(cmap))
    assert_bounds_exact(router, cmap)


# --- PathFinder ------------------------------------------------------------------------


def diamond() -> "nx.Graph[str]":
    """Simple s-t paths by latency: s-a-t 2, s-b-a-t 2.5, s-b-t 3, s-a-b-t 3.5, s-t 5."""
    g: nx.Graph[str] = nx.Graph()
    for idx, (a, b, ms) in enumerate(
        [
            ("s", "a", 1.0),
            ("a", "t", 1.0),
            ("s", "b", 1.0),
            ("b", "t", 2.0),
            ("s", "t", 5.0),
            ("a", "b", 0.5),
        ]
    ):
        g.add_edge(a, b, idx=idx, latency_ms=ms)
    g.add_node("island")
    return g


DIAMOND_ORDER = [
    (("s", "a", "t"), (0, 1), 2.0),
    (("s", "b", "a", "t"), (2, 5, 1), 2.5),
    (("s", "b", "t"), (2, 3), 3.0),
    (("s", "a", "b", "t"), (0, 5, 3), 3.5),
    (("s", "t"), (4,), 5.0),
]


def as_tuples(found: list[GraphPath]) -> list[tuple[tuple[str, ...], tuple[int, ...], object]]:
    """Nodes, links and latency (compared approximately) of each path."""
    for p in found:
        assert p.link_array.dtype == np.int64
        assert p.link_array.tolist() == list(p.links)
    return [(p.nodes, p.links, pytest.approx(p.latency_ms)) for p in found]


@pytest.mark.parametrize("k", [1, 2, 3, 5, 10])
def test_k_feasible_k_shortest(k: int) -> None:
    finder = PathFinder(diamond())
    assert as_tuples(finder.k_feasible("s", "t", k=k, blocked=frozenset())) == DIAMOND_ORDER[:k]


def test_k_feasible_reverse_direction() -> None:
    finder = PathFinder(diamond())
    got = finder.k_feasible("t", "s", k=2, blocked=frozenset())
    assert [p.nodes for p in got] == [("t", "a", "s"), ("t", "a", "b", "s")]
    assert [p.latency_ms for p in got] == pytest.approx([2.0, 2.5])


@pytest.mark.parametrize(
    "blocked",
    [frozenset({1}), frozenset({0, 3}), frozenset({5}), frozenset({4}), frozenset({0, 2})],
)
def test_k_feasible_blocked_equals_pruned_graph(blocked: frozenset[int]) -> None:
    expected = [row for row in DIAMOND_ORDER if blocked.isdisjoint(row[1])]
    # Same answer from a fresh finder and from one whose cache was filled beforehand.
    warm = PathFinder(diamond())
    warm.k_feasible("s", "t", k=1, blocked=frozenset())
    for finder in (PathFinder(diamond()), warm):
        for k in (1, 2, 5):
            assert as_tuples(finder.k_feasible("s", "t", k=k, blocked=blocked)) == expected[:k]
    assert as_tuples(warm.k_feasible("s", "t", k=5, blocked=frozenset())) == DIAMOND_ORDER


def test_k_feasible_degenerate_cases() -> None:
    finder = PathFinder(diamond())
    (same,) = finder.k_feasible("s", "s", k=3, blocked=frozenset())
    assert same.nodes == ("s",)
    assert same.links == ()
    assert same.latency_ms == 0.0
    assert finder.k_feasible("s", "island", k=2, blocked=frozenset()) == []
    assert finder.k_feasible("s", "nowhere", k=2, blocked=frozenset()) == []
    assert finder.k_feasible("s", "t", k=3, blocked=frozenset({0, 2, 4})) == []


def fan(width: int) -> "nx.Graph[str]":
    """s - m{i} - t with latency 2 * (i + 1): path i is the i-th shortest."""
    g: nx.Graph[str] = nx.Graph()
    for i in range(width):
        g.add_edge("s", f"m{i}", idx=2 * i, latency_ms=float(i + 1))
        g.add_edge(f"m{i}", "t", idx=2 * i + 1, latency_ms=float(i + 1))
    return g


def test_k_feasible_falls_back_to_pruned_search(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "ENUMERATION_LIMIT", 2)
    blocked = frozenset({0, 2, 5})  # paths through m0, m1 and m2 are blocked
    finder = PathFinder(fan(6))
    got = finder.k_feasible("s", "t", k=1, blocked=blocked)
    assert [p.nodes for p in got] == [("s", "m3", "t")]
    assert got[0].links == (6, 7)
    assert got[0].latency_ms == pytest.approx(8.0)
    got = finder.k_feasible("s", "t", k=2, blocked=blocked)
    assert [p.nodes for p in got] == [("s", "m3", "t"), ("s", "m4", "t")]
    # Everything blocked but the last: still found.
    only_last = frozenset(2 * i for i in range(5))
    assert [p.nodes for p in finder.k_feasible("s", "t", k=3, blocked=only_last)] == [
        ("s", "m5", "t")
    ]
    # Unblocked after the fallback: the cache is still right.
    got = finder.k_feasible("s", "t", k=3, blocked=frozenset())
    assert [p.nodes for p in got] == [("s", f"m{i}", "t") for i in range(3)]


def test_k_feasible_fallback_when_nothing_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "ENUMERATION_LIMIT", 2)
    finder = PathFinder(fan(5))
    assert finder.k_feasible("s", "t", k=2, blocked=frozenset({0, 2, 4, 6, 8})) == []


# --- SRv6 ------------------------------------------------------------------------------


def sid_parts(sid: str) -> tuple[int, int, int]:
    """(prefix, block, index) of a SID."""
    value = int(ipaddress.IPv6Address(sid))
    return value >> 112, (value >> 96) & 0xFFFF, (value >> 64) & 0xFFFFFFFF


def test_sids_valid_unique_and_in_their_block(tiny_map: ComputeNetworkMap) -> None:
    plan = SidPlan(tiny_map)
    region_block = {rid: i + 1 for i, rid in enumerate(tiny_map.regions)}
    assert region_block == {"east": 1, "west": 2}
    ids = [*tiny_map.nodes, *(s.id for s in tiny_map.sites)]
    sids = {}
    for index, node in enumerate(ids):
        sid = plan.sid(node)
        addr = ipaddress.IPv6Address(sid)
        assert str(addr) == sid
        assert sid_parts(sid)[0] == 0xFC00
        assert int(addr) & ((1 << 64) - 1) == 0
        assert sid_parts(sid)[2] == index
        is_gateway = node in tiny_map.nodes and tiny_map.nodes[node].role in (
            NodeRole.GATEWAY,
            NodeRole.BACKBONE,
        )
        expected = (
            0 if is_gateway else region_block[tiny_map.region_of(tiny_map.node_province[node])]
        )
        assert sid_parts(sid)[1] == expected, node
        assert plan.sid(node) == sid  # stable
        sids[node] = sid
    assert len(set(sids.values())) == len(ids)
    assert sid_parts(sids["AA-gw"])[1] == 0
    assert sid_parts(sids["CC-gw"])[1] == 0
    assert sid_parts(sids["AA-agg1"])[1] == 1
    assert sid_parts(sids["CC-hub"])[1] == 2
    with pytest.raises(KeyError):
        plan.sid("nowhere")


def test_segment_list_one_sid_per_node_after_access(
    router: SegmentRouter, tiny_map: ComputeNetworkMap
) -> None:
    plan = SidPlan(tiny_map)
    (remote,) = one_site(router, tiny_map, "CC-hub", k=1)
    expected = ["AA-gw", "BB-gw", "CC-gw", "CC-agg1", "CC-hub"]
    assert plan.segment_list(remote) == tuple(plan.sid(n) for n in expected)
    (local,) = one_site(router, tiny_map, "AA-dc", k=1)
    assert plan.segment_list(local) == (plan.sid("AA-agg1"), plan.sid("AA-dc"))
    for r in one_site(router, tiny_map, "BB-dc", access_node="CC-acc", k=3):
        nodes = route_nodes(r)
        assert nodes[0] == "CC-acc"
        assert plan.segment_list(r) == tuple(plan.sid(n) for n in nodes[1:])
        assert len(plan.segment_list(r)) == len(r.links)


# --- routes between two sites --------------------------------------------------------------


def _between(
    router: SegmentRouter,
    cmap: ComputeNetworkMap,
    a: str,
    b: str,
    *,
    max_latency_ms: float = math.inf,
) -> list[Route]:
    return router.site_routes(
        from_site=cmap.site_index[a],
        to_site=cmap.site_index[b],
        k=3,
        max_latency_ms=max_latency_ms,
    )


def test_site_to_site_across_regions_is_three_segments_by_their_owners(
    router: SegmentRouter, tiny_map: ComputeNetworkMap
) -> None:
    routes = _between(router, tiny_map, "AA-dc", "CC-hub")
    best = routes[0]
    assert [(s.kind, s.owner) for s in best.segments] == [
        (SegmentKind.SOURCE, "east"),
        (SegmentKind.BACKBONE, NATIONAL_OWNER),
        (SegmentKind.DESTINATION, "west"),
    ]
    # AA-dc -> AA-agg1 (0.2) -> AA-gw (0.5); AA-gw -> BB-gw -> CC-gw (5); CC-gw -> CC-agg1 ->
    # CC-hub (0.7).
    assert best.latency_ms == pytest.approx(6.4)
    assert best.segments[0].path.nodes == ("AA-dc", "AA-agg1", "AA-gw")
    assert best.segments[1].path.nodes == ("AA-gw", "BB-gw", "CC-gw")
    assert best.segments[2].path.nodes == ("CC-gw", "CC-agg1", "CC-hub")
    nodes = route_nodes(best)
    for (a, b), link in zip(itertools.pairwise(nodes), best.links, strict=True):
        assert link_idx(tiny_map, a, b) == link
    assert [r.latency_ms for r in routes] == sorted(r.latency_ms for r in routes)
    back = _between(router, tiny_map, "CC-hub", "AA-dc")[0]
    assert back.latency_ms == pytest.approx(best.latency_ms)
    assert sorted(back.links) == sorted(best.links)
    assert [s.owner for s in back.segments] == ["west", NATIONAL_OWNER, "east"]


def test_site_to_site_in_one_province_is_one_local_segment(
    router: SegmentRouter, tiny_map: ComputeNetworkMap
) -> None:
    best = _between(router, tiny_map, "AA-dc", "AA-idle")[0]
    assert [(s.kind, s.owner) for s in best.segments] == [(SegmentKind.LOCAL, "east")]
    assert best.segments[0].path.nodes == ("AA-dc", "AA-agg1", "AA-idle")
    assert best.latency_ms == pytest.approx(0.4)
    for link in best.links:
        assert tiny_map.node_province[tiny_map.links[link].a] == "AA"


def test_a_site_to_itself_is_an_empty_route_and_bounds_filter(
    router: SegmentRouter, tiny_map: ComputeNetworkMap
) -> None:
    (same,) = _between(router, tiny_map, "BB-hub", "BB-hub")
    assert same.segments == () and same.links == () and same.latency_ms == 0
    assert _between(router, tiny_map, "AA-dc", "CC-hub", max_latency_ms=6.0) == []
    assert len(_between(router, tiny_map, "AA-dc", "CC-hub", max_latency_ms=6.5)) >= 1


def test_site_to_site_routes_avoid_the_blocked_links(
    router: SegmentRouter, tiny_map: ComputeNetworkMap
) -> None:
    start = tiny_map.site_index["AA-dc"]
    for end in ("AA-idle", "CC-hub"):
        best = _between(router, tiny_map, "AA-dc", end)[0]
        for link in best.links:
            found = router.site_routes(
                from_site=start, to_site=tiny_map.site_index[end], k=3, blocked=frozenset({link})
            )
            assert found and all(link not in r.links for r in found), (end, link)
    across = _between(router, tiny_map, "AA-dc", "CC-hub")[0]
    backbone = link_idx(tiny_map, "AA-gw", "BB-gw")
    (detour,) = router.site_routes(
        from_site=start, to_site=tiny_map.site_index["CC-hub"], k=1, blocked=frozenset({backbone})
    )
    assert detour.segments[1].path.nodes == ("AA-gw", "CC-gw")
    assert detour.latency_ms == pytest.approx(11.4)
    assert _between(router, tiny_map, "AA-dc", "CC-hub")[0].links == across.links
