"""The built-in map `china`: structure, provenance and the stated assumptions it must honour."""

import networkx as nx
import pytest

from cnbrain.domain.enums import CpuArch, LinkLayer, NodeRole, SiteKind
from cnbrain.netmap.china import china_document
from cnbrain.netmap.compute_map import ComputeNetworkMap

PROVINCE_CODES = (
    "BJ", "TJ", "HE", "SX", "NM", "LN", "JL", "HL", "SH", "JS", "ZJ", "AH", "FJ", "JX", "SD",
    "HA", "HB", "HN", "GD", "GX", "HI", "CQ", "SC", "GZ", "YN", "XZ", "SN", "GS", "QH", "NX",
    "XJ",
)  # fmt: skip

REGIONS = {
    "north": {"BJ", "TJ", "HE", "SX", "NM", "LN", "JL", "HL"},
    "east": {"SH", "JS", "ZJ", "AH", "FJ", "JX", "SD"},
    "south": {"HA", "HB", "HN", "GD", "GX", "HI"},
    "west": {"CQ", "SC", "GZ", "YN", "XZ", "SN", "GS", "QH", "NX", "XJ"},
}

HUB_PROVINCES = {
    "HE-hub-zhangjiakou": "HE",
    "SH-hub-qingpu": "SH",
    "AH-hub-wuhu": "AH",
    "GD-hub-shaoguan": "GD",
    "SC-hub-tianfu": "SC",
    "CQ-hub-chongqing": "CQ",
    "NM-hub-horinger": "NM",
    "GZ-hub-guian": "GZ",
    "GS-hub-qingyang": "GS",
    "NX-hub-zhongwei": "NX",
}


@pytest.fixture(scope="module")
def china() -> ComputeNetworkMap:
    return ComputeNetworkMap.from_document(china_document())


def _backbone(m: ComputeNetworkMap) -> "nx.Graph[str]":
    return nx.Graph(
        (a, b, d) for a, b, d in m.graph.edges(data=True) if d["layer"] == LinkLayer.BACKBONE
    )


def test_document_is_named_and_attributed() -> None:
    doc = china_document()
    assert doc.name == "china"
    assert "Topology Zoo" in doc.attribution
    assert "CC BY 4.0" in doc.attribution
    assert "Seventh National Population Census" in doc.attribution


def test_provinces_and_regions(china: ComputeNetworkMap) -> None:
    assert len(PROVINCE_CODES) == 31
    assert sorted(china.province_codes) == sorted(PROVINCE_CODES)
    assert set(china.regions) == set(REGIONS)
    for region, codes in REGIONS.items():
        assert {p.code for p in china.provinces.values() if p.region == region} == codes
    assert sum(p.demand_weight for p in china.provinces.values()) == pytest.approx(1.0, abs=1e-4)
    assert china.provinces["GD"].demand_weight > china.provinces["XZ"].demand_weight


def test_every_province_has_gateway_aggregation_and_access(china: ComputeNetworkMap) -> None:
    for code, province in china.provinces.items():
        assert province.gateway == f"{code}-gw"
        assert china.nodes[province.gateway].role is NodeRole.GATEWAY
        assert (province.lat, province.lon) == (
            china.nodes[province.gateway].lat,
            china.nodes[province.gateway].lon,
        )
        for agg in (f"{code}-agg-1", f"{code}-agg-2"):
            assert china.nodes[agg].role is NodeRole.AGGREGATION
        assert 1 <= len(province.access_nodes) <= 3
    most_populous = max(china.provinces.values(), key=lambda p: p.demand_weight)
    assert len(most_populous.access_nodes) == 3


def test_ten_hub_sites_in_their_provinces(china: ComputeNetworkMap) -> None:
    hubs = {s.id: s for s in china.sites if s.kind is SiteKind.HUB}
    assert {h: s.province for h, s in hubs.items()} == HUB_PROVINCES
    assert sum(s.cpu_arch is CpuArch.AARCH64 for s in hubs.values()) >= 2
    for site in hubs.values():
        assert site.pue <= float(site.labels["pue_target"])
        assert sum(site.capacity.accelerators.values()) >= 500


def test_site_mix(china: ComputeNetworkMap) -> None:
    kinds = [s.kind for s in china.sites]
    assert 90 <= len(kinds) <= 110
    assert kinds.count(SiteKind.EDGE) >= 20
    assert 8 <= kinds.count(SiteKind.IDLE) <= 12
    for code in PROVINCE_CODES:
        assert any(s.kind is SiteKind.PROVINCIAL and s.province == code for s in china.sites)


def test_every_site_is_dual_homed_to_the_aggregation_nodes(china: ComputeNetworkMap) -> None:
    for site in china.sites:
        neighbours = set(china.graph[site.id])
        assert neighbours == {f"{site.province}-agg-1", f"{site.province}-agg-2"}


def test_intra_province_latency_floor(china: ComputeNetworkMap) -> None:
    inside = [link for link in china.links if link.layer is not LinkLayer.BACKBONE]
    assert inside
    assert min(link.latency_ms for link in inside) >= 0.05


def test_backbone_is_the_cleaned_chinanet(china: ComputeNetworkMap) -> None:
    backbone = _backbone(china)
    assert nx.is_connected(backbone)
    assert backbone.number_of_nodes() == 37
    assert backbone.number_of_edges() == 59
    extra = {n for n in backbone if china.nodes[n].role is NodeRole.BACKBONE}
    assert extra == {
        "SD-bb-qingdao",
        "JS-bb-suzhou",
        "FJ-bb-xiamen",
        "LN-bb-dalian",
        "XJ-bb-kashi",
        "XZ-bb-shiquanhe",
    }
    assert {p.gateway for p in china.provinces.values()} <= set(backbone)
    assert {link.bandwidth_gbps for link in china.links if link.layer is LinkLayer.BACKBONE} == {
        400.0,
        800.0,
    }


def test_beijing_shanghai_backbone_latency(china: ComputeNetworkMap) -> None:
    latency = nx.shortest_path_length(_backbone(china), "BJ-gw", "SH-gw", weight="latency_ms")
    assert 5.0 <= latency <= 15.0


def test_western_hubs_are_greener_and_cheaper(china: ComputeNetworkMap) -> None:
    hubs = [s for s in china.sites if s.kind is SiteKind.HUB]
    west = [s for s in hubs if s.labels["hub_zone"] == "west"]
    east = [s for s in hubs if s.labels["hub_zone"] == "east"]
    assert len(west) == 4
    assert len(east) == 6
    assert max(s.pue for s in west) < min(s.pue for s in east)
    for model in ("A100", "Ascend910B"):
        west_prices = [
            s.prices.accelerator_hour[model] for s in west if model in s.prices.accelerator_hour
        ]
        east_prices = [
            s.prices.accelerator_hour[model] for s in east if model in s.prices.accelerator_hour
        ]
        assert west_prices
        assert east_prices
        assert max(west_prices) < min(east_prices)


def test_deterministic() -> None:
    assert china_document.__wrapped__() == china_document.__wrapped__()
    assert china_document() is china_document()
