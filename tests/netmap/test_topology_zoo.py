"""Topology Zoo networks as maps: the conversion rule, parallel edges and bad files."""

import math
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest

from cnbrain.domain.enums import LinkLayer, NodeRole, SiteKind
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.errors import MapError
from cnbrain.netmap.geo import fibre_latency_ms
from cnbrain.netmap.topology_zoo import ZOO_REGION, zoo_document

DATA = Path(__file__).resolve().parents[1] / "data"
CHINANET = DATA / "Chinanet.gml"
CERNET = DATA / "Cernet.gml"


@pytest.fixture(scope="module")
def chinanet() -> ComputeNetworkMap:
    return ComputeNetworkMap.from_document(zoo_document(CHINANET))


def test_chinanet_follows_the_rule(chinanet: ComputeNetworkMap) -> None:
    document = chinanet.document
    assert document.name == "zoo:Chinanet"
    assert "Topology Zoo" in document.attribution
    assert [r.id for r in document.regions] == [ZOO_REGION]
    # 42 nodes, of which the 4 "International Link" nodes have no coordinates.
    assert len(document.provinces) == 38
    assert {"Beijing", "Shanghai", "Hong_Kong", "Xi_an"} <= set(chinanet.provinces)
    for province in document.provinces:
        gateway = chinanet.nodes[province.gateway]
        assert gateway.id == f"{province.code}-gw"
        assert (gateway.lat, gateway.lon) == (province.lat, province.lon)
        assert province.access_nodes == (f"{province.code}-acc-0",)
        aggs = [n for n in chinanet.nodes if n.startswith(f"{province.code}-agg-")]
        assert sorted(aggs) == [f"{province.code}-agg-0", f"{province.code}-agg-1"]
    assert nx.is_connected(chinanet.graph)


def test_chinanet_backbone_and_sites(chinanet: ComputeNetworkMap) -> None:
    backbone = [link for link in chinanet.links if link.layer is LinkLayer.BACKBONE]
    assert len(backbone) == 62
    assert {link.bandwidth_gbps for link in backbone} == {100.0}
    for link in backbone:
        a, b = chinanet.nodes[link.a], chinanet.nodes[link.b]
        assert a.role is b.role is NodeRole.GATEWAY
        expected = max(0.05, fibre_latency_ms(a.lat, a.lon, b.lat, b.lon))
        assert link.latency_ms == pytest.approx(expected, abs=1e-3)
    kinds = Counter(site.kind for site in chinanet.sites)
    assert kinds == {SiteKind.PROVINCIAL: 38, SiteKind.HUB: math.ceil(38 / 4)}
    hubs = {site.province for site in chinanet.sites if site.kind is SiteKind.HUB}
    degree = Counter(p for link in backbone for p in (link.a, link.b))
    lowest_hub = min(degree[f"{code}-gw"] for code in hubs)
    assert all(
        degree[f"{code}-gw"] <= lowest_hub for code in chinanet.provinces if code not in hubs
    )
    assert {"Beijing", "Shanghai", "Guangzhou"} <= hubs


def test_seed_changes_sites_but_not_topology() -> None:
    first, again, other = (zoo_document(CHINANET, seed=s) for s in (1, 1, 2))
    assert first == again
    assert first.sites != other.sites
    assert [(p.code, p.lat, p.lon) for p in first.provinces] == [
        (p.code, p.lat, p.lon) for p in other.provinces
    ]
    assert [link.id for link in first.links if link.layer is LinkLayer.BACKBONE] == [
        link.id for link in other.links if link.layer is LinkLayer.BACKBONE
    ]


def test_cernet_with_parallel_edges_loads() -> None:
    compute_map = ComputeNetworkMap.from_document(zoo_document(CERNET))
    # 41 nodes, 4 without coordinates (Japan, Europe, N.A, Korea); Shijiazhuang appears twice.
    assert len(compute_map.provinces) == 37
    assert {"Shijiazhuang", "Shijiazhuang_2"} <= set(compute_map.provinces)
    backbone = {link.id: link for link in compute_map.links if link.layer is LinkLayer.BACKBONE}
    assert len(backbone) == 54
    assert backbone["Beijing-gw--Xi_an-gw"].bandwidth_gbps == pytest.approx(0.155)
    assert {link.bandwidth_gbps for link in backbone.values()} == {0.002, 0.155, 2.5, 100.0}


GML_HEAD = 'graph [\n  Network "Toy"\n'


def _gml(tmp_path: Path, body: str, name: str = "Toy.gml") -> Path:
    path = tmp_path / name
    path.write_text(GML_HEAD + body + "]\n", encoding="utf-8")
    return path


def _node(node_id: int, label: str, lat: float | None = None, lon: float | None = None) -> str:
    coords = "" if lat is None else f"    Latitude {lat}\n    Longitude {lon}\n"
    return f'  node [\n    id {node_id}\n    label "{label}"\n{coords}  ]\n'


def _edge(a: int, b: int, speed: float | None = None) -> str:
    raw = "" if speed is None else f"    LinkSpeedRaw {speed}\n"
    return f"  edge [\n    source {a}\n    target {b}\n{raw}  ]\n"


def test_parallel_edges_keep_the_highest_speed(tmp_path: Path) -> None:
    body = (
        _node(0, "Alpha", 30.0, 110.0)
        + _node(1, "Beta", 31.0, 111.0)
        + _node(2, "Gamma", 32.0, 112.0)
        + _edge(0, 1, 1e9)
        + _edge(1, 0, 4e10)
        + _edge(0, 1)
        + _edge(1, 2)
        + _edge(2, 1)
        + _edge(2, 2, 1e9)
    )
    document = zoo_document(_gml(tmp_path, body))
    speeds = {link.id: link.bandwidth_gbps for link in document.links if link.layer == "backbone"}
    assert speeds == {"Alpha-gw--Beta-gw": 40.0, "Beta-gw--Gamma-gw": 100.0}


def test_nodes_without_coordinates_and_small_components_are_dropped(tmp_path: Path) -> None:
    body = (
        _node(0, "São Paulo", -23.5, -46.6)
        + _node(1, "Rio de Janeiro", -22.9, -43.2)
        + _node(2, "Rio de Janeiro", -22.8, -43.1)
        + _node(3, "Nowhere")
        + _node(4, "Island", 10.0, 10.0)
        + _node(5, "Islet", 10.1, 10.1)
        + _edge(0, 1)
        + _edge(1, 2)
        + _edge(2, 3)
        + _edge(3, 4)
        + _edge(4, 5)
    )
    document = zoo_document(_gml(tmp_path, body))
    assert [p.code for p in document.provinces] == [
        "Sao_Paulo",
        "Rio_de_Janeiro",
        "Rio_de_Janeiro_2",
    ]
    assert document.provinces[0].name == "São Paulo"
    assert sum(s.kind is SiteKind.HUB for s in document.sites) == 1
    assert ComputeNetworkMap.from_document(document).graph.number_of_nodes() > 0


def test_a_single_pop_is_a_map(tmp_path: Path) -> None:
    compute_map = ComputeNetworkMap.from_document(
        zoo_document(_gml(tmp_path, _node(0, "Solo", 40.0, 116.0)))
    )
    assert list(compute_map.provinces) == ["Solo"]
    assert len(compute_map.sites) == 2


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("", "no node has both Latitude and Longitude"),
        (_node(0, "A") + _node(1, "B") + _edge(0, 1), "no node has both Latitude and Longitude"),
        (_node(0, "A", 95.0, 10.0), "'A'.*not valid coordinates"),
        (_node(0, "A", 1.0, 2.0) + _node(1, "B", 2.0, 3.0) + _edge(0, 1, -5), "LinkSpeedRaw"),
        (_node(0, "A", 1.0, 2.0) + _edge(0, 7), "not a valid GML graph"),
        ("  node [ id 0 \n", "not a valid GML graph"),
    ],
)
def test_bad_files_are_refused(tmp_path: Path, body: str, problem: str) -> None:
    path = _gml(tmp_path, body, name="Broken.gml")
    with pytest.raises(MapError, match=rf"Broken\.gml: .*{problem}"):
        zoo_document(path)


def test_missing_and_non_gml_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(MapError, match=r"Absent\.gml: cannot read"):
        zoo_document(tmp_path / "Absent.gml")
    text = tmp_path / "Text.gml"
    text.write_text("just some words\n", encoding="utf-8")
    with pytest.raises(MapError, match=r"Text\.gml: not a valid GML graph"):
        zoo_document(text)
