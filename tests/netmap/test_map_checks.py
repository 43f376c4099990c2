"""The example map loads, and each way of breaking it is refused with the item named."""

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.errors import MapError
from cnbrain.netmap.files import parse_map_document, read_map_document

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "maps" / "two-provinces.yaml"

Raw = dict[str, Any]


@pytest.fixture(scope="module")
def raw() -> Raw:
    loaded = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def _load(raw: Raw) -> ComputeNetworkMap:
    return ComputeNetworkMap.from_document(parse_map_document(raw))


def _item(items: list[Raw], key: str, value: str) -> Raw:
    return next(item for item in items if item.get(key) == value)


def _link(raw: Raw, a: str, b: str) -> Raw:
    return next(link for link in raw["links"] if (link["a"], link["b"]) == (a, b))


def test_the_example_loads() -> None:
    compute_map = ComputeNetworkMap.from_document(read_map_document(EXAMPLE))
    assert compute_map.name == "two-provinces"
    assert compute_map.province_codes == ("SH", "JS")
    assert [s.id for s in compute_map.sites] == ["SH-hub-0", "SH-edge-1", "JS-provincial-0"]
    owners = {link.id: link.owner for link in compute_map.links}
    assert owners["SH-gw--JS-gw"] == "national"
    assert owners["SH-gw--SH-agg-0"] == "east"


def test_the_documented_example_is_the_example_file() -> None:
    text = (ROOT / "docs" / "map-format.md").read_text(encoding="utf-8")
    block = text.split("## A complete example", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    assert block == EXAMPLE.read_text(encoding="utf-8")


def _unknown_link_end(raw: Raw) -> None:
    _link(raw, "SH-gw", "JS-gw")["b"] = "ZJ-gw"


def _negative_cores(raw: Raw) -> None:
    _item(raw["sites"], "id", "SH-edge-1")["capacity"]["cpu_cores"] = -4


def _negative_accelerators(raw: Raw) -> None:
    _item(raw["sites"], "id", "SH-edge-1")["capacity"]["accelerators"]["T4"] = -1


def _negative_bandwidth(raw: Raw) -> None:
    _link(raw, "JS-gw", "JS-agg-0")["bandwidth_gbps"] = -10


def _gateway_missing(raw: Raw) -> None:
    raw["nodes"] = [n for n in raw["nodes"] if n["id"] != "JS-gw"]


def _gateway_not_a_gateway(raw: Raw) -> None:
    _item(raw["provinces"], "code", "JS")["gateway"] = "JS-agg-0"


def _unknown_model(raw: Raw) -> None:
    site = _item(raw["sites"], "id", "JS-provincial-0")
    site["capacity"]["accelerators"] = {"L40X": 64}
    site["prices"]["accelerator_hour"] = {"L40X": 6.5}


def _duplicate_site(raw: Raw) -> None:
    raw["sites"].append(copy.deepcopy(_item(raw["sites"], "id", "SH-edge-1")))


def _duplicate_node(raw: Raw) -> None:
    raw["nodes"].append(copy.deepcopy(_item(raw["nodes"], "id", "SH-agg-1")))


def _duplicate_province(raw: Raw) -> None:
    raw["provinces"].append(copy.deepcopy(_item(raw["provinces"], "code", "JS")))


def _duplicate_region(raw: Raw) -> None:
    raw["regions"].append({"id": "east"})


def _site_id_used_by_node(raw: Raw) -> None:
    _item(raw["sites"], "id", "JS-provincial-0")["id"] = "JS-acc-0"


def _duplicate_link(raw: Raw) -> None:
    raw["links"].append({**_link(raw, "JS-gw", "JS-agg-0"), "a": "JS-agg-0", "b": "JS-gw"})


def _cross_province_link(raw: Raw) -> None:
    raw["links"].append(
        {
            "a": "SH-agg-0",
            "b": "JS-agg-0",
            "layer": "province",
            "bandwidth_gbps": 100,
            "latency_ms": 2,
        }
    )


def _backbone_to_aggregation(raw: Raw) -> None:
    raw["links"].append(
        {"a": "SH-gw", "b": "JS-agg-0", "layer": "backbone", "bandwidth_gbps": 100, "latency_ms": 2}
    )


def _site_to_site(raw: Raw) -> None:
    raw["links"].append(
        {
            "a": "SH-hub-0",
            "b": "SH-edge-1",
            "layer": "province",
            "bandwidth_gbps": 100,
            "latency_ms": 1,
        }
    )


def _wrong_owner(raw: Raw) -> None:
    _link(raw, "SH-gw", "JS-gw")["owner"] = "east"


def _unreachable_site(raw: Raw) -> None:
    raw["links"] = [link for link in raw["links"] if "SH-edge-1" not in (link["a"], link["b"])]


def _unreachable_access_node(raw: Raw) -> None:
    raw["links"] = [link for link in raw["links"] if "JS-acc-0" not in (link["a"], link["b"])]


def _gateway_cut_off(raw: Raw) -> None:
    raw["links"] = [link for link in raw["links"] if link["layer"] != "backbone"]


def _missing_price(raw: Raw) -> None:
    _item(raw["sites"], "id", "SH-hub-0")["prices"]["accelerator_hour"].pop("H800")


def _unknown_region(raw: Raw) -> None:
    _item(raw["provinces"], "code", "JS")["region"] = "west"


def _node_in_unknown_province(raw: Raw) -> None:
    _item(raw["nodes"], "id", "JS-agg-0")["province"] = "ZJ"


def _access_node_of_other_province(raw: Raw) -> None:
    _item(raw["provinces"], "code", "JS")["access_nodes"] = ["SH-acc-0"]


def _no_access_node(raw: Raw) -> None:
    _item(raw["provinces"], "code", "SH")["access_nodes"] = []


def _unknown_field(raw: Raw) -> None:
    _item(raw["sites"], "id", "SH-hub-0")["colour"] = "blue"


def _bad_kind(raw: Raw) -> None:
    _item(raw["sites"], "id", "JS-provincial-0")["kind"] = "cloud"


def _pue_below_one(raw: Raw) -> None:
    _item(raw["sites"], "id", "SH-hub-0")["pue"] = 0.9


def _latitude_out_of_range(raw: Raw) -> None:
    _item(raw["nodes"], "id", "SH-acc-0")["lat"] = 131.2


def _self_link(raw: Raw) -> None:
    _link(raw, "JS-gw", "JS-agg-0")["b"] = "JS-gw"


def _access_only_through_a_site(raw: Raw) -> None:
    link = _link(raw, "JS-acc-0", "JS-gw")
    link["b"] = "JS-provincial-0"
    link["layer"] = "province"


BREAKAGES: list[tuple[Callable[[Raw], None], str]] = [
    (_unknown_link_end, r"link 'SH-gw--ZJ-gw': node 'ZJ-gw' is unknown"),
    (_negative_cores, r"sites\[1\] \(id 'SH-edge-1'\): capacity\.cpu_cores"),
    (_negative_accelerators, r"site 'SH-edge-1': capacity\.accelerators\.T4 is negative"),
    (_negative_bandwidth, r"links\[9\] \(JS-gw--JS-agg-0\): bandwidth_gbps"),
    (_gateway_missing, r"province 'JS': gateway 'JS-gw' is not a gateway node"),
    (_gateway_not_a_gateway, r"province 'JS': gateway 'JS-agg-0' is not a gateway node"),
    (_unknown_model, r"site 'JS-provincial-0': .*model 'L40X' is not in the accelerator catalog"),
    (_duplicate_site, r"site 'SH-edge-1': id appears more than once"),
    (_duplicate_node, r"node 'SH-agg-1': id appears more than once"),
    (_duplicate_province, r"province 'JS': code appears more than once"),
    (_duplicate_region, r"region 'east': id appears more than once"),
    (_site_id_used_by_node, r"site 'JS-acc-0': the id is already used by a network node"),
    (_duplicate_link, r"link 'JS-agg-0--JS-gw': the two nodes are already joined"),
    (_cross_province_link, r"link 'SH-agg-0--JS-agg-0': a province link must stay in one province"),
    (_backbone_to_aggregation, r"link 'SH-gw--JS-agg-0': backbone links join gateway .*'JS-agg-0'"),
    (_site_to_site, r"link 'SH-hub-0--SH-edge-1': sites are endpoints"),
    (_wrong_owner, r"link 'SH-gw--JS-gw': owner 'east' does not own a backbone link"),
    (_unreachable_site, r"province 'SH': 'SH-edge-1' cannot reach gateway 'SH-gw'"),
    (_unreachable_access_node, r"province 'JS': 'JS-acc-0' cannot reach gateway 'JS-gw'"),
    (_access_only_through_a_site, r"province 'JS': 'JS-acc-0' cannot reach gateway 'JS-gw'"),
    (_gateway_cut_off, r"province 'JS': gateway 'JS-gw' is cut off from the backbone"),
    (_missing_price, r"site 'SH-hub-0': prices\.accelerator_hour has no price for 'H800'"),
    (_unknown_region, r"province 'JS': region 'west' is unknown"),
    (_node_in_unknown_province, r"node 'JS-agg-0': province 'ZJ' is unknown"),
    (_access_node_of_other_province, r"province 'JS': access node 'SH-acc-0' is not an access"),
    (_no_access_node, r"province 'SH': access_nodes is empty"),
    (_unknown_field, r"sites\[0\] \(id 'SH-hub-0'\): colour: Extra inputs are not permitted"),
    (_bad_kind, r"sites\[2\] \(id 'JS-provincial-0'\): kind"),
    (_pue_below_one, r"sites\[0\] \(id 'SH-hub-0'\): pue"),
    (_latitude_out_of_range, r"nodes\[3\] \(id 'SH-acc-0'\): lat"),
    (_self_link, r"link 'JS-gw--JS-gw': a link must join two different nodes"),
]


@pytest.mark.parametrize(
    ("breakage", "message"), BREAKAGES, ids=[b.__name__[1:] for b, _ in BREAKAGES]
)
def test_a_broken_map_is_refused(raw: Raw, breakage: Callable[[Raw], None], message: str) -> None:
    broken = copy.deepcopy(raw)
    breakage(broken)
    with pytest.raises(MapError, match=message):
        _load(broken)


def test_a_document_must_be_a_mapping() -> None:
    with pytest.raises(MapError, match="must be a mapping"):
        parse_map_document(["not", "a", "map"])
