"""The seeded synthetic map: spec parsing, determinism, structure and the geometry helpers."""

import math
from collections import Counter

import networkx as nx
import numpy as np
import pytest

from cnbrain.domain.accelerators import ACCELERATOR_MODELS
from cnbrain.domain.enums import CpuArch, Interconnect, LinkLayer, NodeRole, SiteKind
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.errors import MapError
from cnbrain.netmap.synthetic import (
    SYNTHETIC_PREFIX,
    nearest_neighbours,
    parse_synthetic_spec,
    spanning_tree,
    synthetic_document,
)


@pytest.fixture(scope="module")
def small() -> ComputeNetworkMap:
    return ComputeNetworkMap.from_document(
        synthetic_document(provinces=9, sites_per_province=60, seed=5)
    )


def test_same_seed_gives_the_same_document() -> None:
    first = synthetic_document(provinces=6, sites_per_province=12, seed=3)
    again = synthetic_document(provinces=6, sites_per_province=12, seed=3)
    other = synthetic_document(provinces=6, sites_per_province=12, seed=4)
    assert first == again
    assert first.model_dump() == again.model_dump()
    assert first != other


def test_document_name_is_its_spec() -> None:
    document = synthetic_document(provinces=4, sites_per_province=3, seed=2)
    assert document.name.startswith(SYNTHETIC_PREFIX)
    assert parse_synthetic_spec(document.name) == {
        "provinces": 4,
        "sites_per_province": 3,
        "seed": 2,
    }


def test_counts_and_ids(small: ComputeNetworkMap) -> None:
    document = small.document
    assert [p.code for p in document.provinces] == [f"P{i:03d}" for i in range(9)]
    assert len(document.sites) == 9 * 60
    per_province = Counter(s.province for s in document.sites)
    assert set(per_province.values()) == {60}
    region_sizes = Counter(p.region for p in document.provinces)
    assert set(region_sizes) == {r.id for r in document.regions}
    assert max(region_sizes.values()) <= 8
    for province in document.provinces:
        code = province.code
        assert province.gateway == f"{code}-gw"
        assert small.nodes[f"{code}-gw"].role is NodeRole.GATEWAY
        aggs = [n for n in small.nodes if n.startswith(f"{code}-agg-")]
        assert len(aggs) == max(2, 60 // 25)
        assert all(small.nodes[n].role is NodeRole.AGGREGATION for n in aggs)
        assert 1 <= len(province.access_nodes) <= 3
        assert province.access_nodes[0] == f"{code}-acc-0"
        assert province.demand_weight > 0
        assert 20 <= province.lat <= 48 and 80 <= province.lon <= 125


def test_hub_provinces_have_two_hubs_each(small: ComputeNetworkMap) -> None:
    hubs = Counter(s.province for s in small.sites if s.kind is SiteKind.HUB)
    assert len(hubs) == (9 + 2) // 4
    assert set(hubs.values()) == {2}
    kinds = Counter(s.kind for s in small.sites if s.kind is not SiteKind.HUB)
    assert kinds[SiteKind.EDGE] > kinds[SiteKind.PROVINCIAL]
    assert kinds[SiteKind.EDGE] > kinds[SiteKind.IDLE]


def test_every_site_is_dual_homed_and_reachable(small: ComputeNetworkMap) -> None:
    graph = small.graph
    assert nx.is_connected(graph)
    for site in small.sites:
        neighbours = list(graph[site.id])
        assert len(neighbours) == 2
        assert all(small.nodes[n].role is NodeRole.AGGREGATION for n in neighbours)
        assert all(graph[site.id][n]["layer"] is LinkLayer.PROVINCE for n in neighbours)


def test_backbone_spans_all_gateways(small: ComputeNetworkMap) -> None:
    backbone = [link for link in small.links if link.layer is LinkLayer.BACKBONE]
    gateways = nx.Graph((link.a, link.b) for link in backbone)
    assert set(gateways) == {p.gateway for p in small.provinces.values()}
    assert nx.is_connected(gateways)
    assert min(degree for _, degree in gateways.degree) >= 2
    assert len(backbone) >= len(small.provinces)
    for link in backbone:
        assert link.bandwidth_gbps == 400
        assert link.owner == "national"
        assert link.cost_per_gbps_hour > 0
        assert link.latency_ms >= 0.05


def test_links_follow_the_conventions(small: ComputeNetworkMap) -> None:
    for link in small.links:
        assert link.latency_ms >= 0.05
        if link.layer is LinkLayer.ACCESS:
            assert link.bandwidth_gbps == 100
        elif link.a in small.site_index or link.b in small.site_index:
            assert 100 <= link.bandwidth_gbps <= 400
        elif link.layer is LinkLayer.PROVINCE:
            assert link.bandwidth_gbps == 800


def test_sites_are_plausible(small: ComputeNetworkMap) -> None:
    for site in small.sites:
        assert set(site.capacity.accelerators) <= set(ACCELERATOR_MODELS)
        assert set(site.capacity.accelerators) <= set(site.prices.accelerator_hour)
        assert 300 <= site.carbon_g_per_kwh <= 800
        assert 0.03 <= site.prices.cpu_core_hour <= 0.12
        assert 0.003 <= site.prices.memory_gib_hour <= 0.01
        capital = small.provinces[site.province]
        assert abs(site.lat - capital.lat) <= 2 and abs(site.lon - capital.lon) <= 2
        if site.kind is SiteKind.HUB:
            assert site.capacity.cpu_cores >= 4096
            assert sum(site.capacity.accelerators.values()) >= 200
            assert site.interconnect in {Interconnect.IB, Interconnect.ROCE}
            assert 1.15 <= site.pue <= 1.25
        else:
            assert site.interconnect is not Interconnect.IB
    arches = Counter(s.cpu_arch for s in small.sites)
    assert 0.05 < arches[CpuArch.AARCH64] / len(small.sites) < 0.3


def test_hubs_are_cheaper_than_edges(small: ComputeNetworkMap) -> None:
    def mean_core_price(kind: SiteKind) -> float:
        prices = [s.prices.cpu_core_hour for s in small.sites if s.kind is kind]
        return sum(prices) / len(prices)

    assert mean_core_price(SiteKind.HUB) < mean_core_price(SiteKind.EDGE)


@pytest.mark.parametrize(("provinces", "sites"), [(1, 1), (2, 1), (3, 2), (17, 1), (5, 26)])
def test_small_shapes_load(provinces: int, sites: int) -> None:
    document = synthetic_document(provinces=provinces, sites_per_province=sites, seed=0)
    compute_map = ComputeNetworkMap.from_document(document)
    assert len(compute_map.sites) == provinces * sites
    assert nx.is_connected(compute_map.graph)


def test_a_3100_site_map_loads() -> None:
    document = synthetic_document(
        **parse_synthetic_spec("synthetic:provinces=31,sites_per_province=100")
    )
    compute_map = ComputeNetworkMap.from_document(document)
    assert len(compute_map.sites) == 3100
    assert len(compute_map.provinces) == 31
    assert len(compute_map.regions) == 4


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("synthetic:provinces=31,sites_per_province=100", (31, 100, 0)),
        ("synthetic:provinces=2,sites_per_province=3,seed=9", (2, 3, 9)),
        ("synthetic: seed = 4 , sites_per_province=1,provinces=100000", (100000, 1, 4)),
        ("synthetic:provinces=100,sites_per_province=1000", (100, 1000, 0)),
    ],
)
def test_good_specs(spec: str, expected: tuple[int, int, int]) -> None:
    provinces, sites, seed = expected
    assert parse_synthetic_spec(spec) == {
        "provinces": provinces,
        "sites_per_province": sites,
        "seed": seed,
    }


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ("synthetic:provinces=0,sites_per_province=1", "provinces"),
        ("synthetic:provinces=-3,sites_per_province=1", "provinces"),
        ("synthetic:provinces=2,sites_per_province=0", "sites_per_province"),
        ("synthetic:provinces=two,sites_per_province=1", "provinces"),
        ("synthetic:provinces=2,sites_per_province=1.5", "sites_per_province"),
        ("synthetic:provinces=2,sites_per_province=1,seed=x", "seed"),
        ("synthetic:provinces=2,sites_per_province=1,seed=-1", "seed"),
        ("synthetic:provinces=2,sites_per_province=1,colour=3", "colour"),
        ("synthetic:provinces=2,provinces=3,sites_per_province=1", "provinces"),
        ("synthetic:provinces=2", "sites_per_province"),
        ("synthetic:sites_per_province=2", "provinces"),
        ("synthetic:provinces=1000,sites_per_province=101", "sites_per_province"),
        ("synthetic:provinces=31,sites_per_province=3226", "provinces * sites_per_province"),
        ("synthetic:provinces=2,sites_per_province", "sites_per_province"),
    ],
)
def test_bad_specs_name_the_key(spec: str, key: str) -> None:
    with pytest.raises(MapError, match=key.replace("*", r"\*")):
        parse_synthetic_spec(spec)


def test_keyword_arguments_are_checked_too() -> None:
    with pytest.raises(MapError, match="provinces"):
        synthetic_document(provinces=0, sites_per_province=3, seed=0)
    with pytest.raises(MapError, match="100000"):
        synthetic_document(provinces=1000, sites_per_province=1000, seed=0)


def test_nearest_neighbours_are_exact_on_the_grid_path() -> None:
    rng = np.random.default_rng(1)
    xy = rng.uniform((80, 20), (125, 48), size=(1500, 2))
    found = nearest_neighbours(xy, 10)
    dist = np.sqrt(((xy[:, None, :] - xy[None, :, :]) ** 2).sum(axis=2))
    np.fill_diagonal(dist, np.inf)
    expected = np.argsort(dist, axis=1, kind="stable")[:, :10]
    assert found.shape == (1500, 10)
    assert (found == expected).all()


def test_nearest_neighbours_of_tiny_inputs() -> None:
    assert nearest_neighbours(np.zeros((1, 2)), 10).shape == (1, 0)
    pair = nearest_neighbours(np.array([[0.0, 0.0], [1.0, 0.0]]), 10)
    assert pair.tolist() == [[1], [0]]


def _mst_length(xy: np.ndarray) -> float:
    dist = np.sqrt(((xy[:, None, :] - xy[None, :, :]) ** 2).sum(axis=2))
    tree = nx.minimum_spanning_tree(nx.from_numpy_array(dist))
    return float(tree.size(weight="weight"))


def test_spanning_tree_is_minimal() -> None:
    xy = np.random.default_rng(2).uniform((80, 20), (125, 48), size=(200, 2))
    tree = spanning_tree(xy, nearest_neighbours(xy, 10))
    assert nx.is_tree(nx.Graph(tree)) and len(tree) == 199
    length = sum(math.dist(xy[a], xy[b]) for a, b in tree)
    assert length == pytest.approx(_mst_length(xy))


def test_spanning_tree_joins_far_apart_clusters() -> None:
    rng = np.random.default_rng(3)
    xy = np.concatenate(
        [rng.normal((0, 0), 0.01, (40, 2)), rng.normal((5, 5), 0.01, (40, 2)), [[10.0, 0.0]]]
    )
    tree = spanning_tree(xy, nearest_neighbours(xy, 10))
    graph = nx.Graph(tree)
    assert graph.number_of_nodes() == 81 and nx.is_tree(graph)
    length = sum(math.dist(xy[a], xy[b]) for a, b in tree)
    assert length == pytest.approx(_mst_length(xy))
