"""Bad requests are refused with a message that names the field."""

from typing import Any

import pytest

from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.errors import RequestError
from cnbrain.placement.request_check import check_request, parse_request


def good() -> dict[str, Any]:
    return {
        "source_province": "AA",
        "resources": {"cpu": 4, "memory_gib": 16, "accelerator": {"model": "A100", "count": 1}},
        "constraints": {"max_latency_ms": 20, "min_bandwidth_gbps": 1},
        "duration_hours": 2,
        "objective": {"cost": 1, "latency": 1, "energy": 1, "balance": 1},
    }


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r["resources"]["accelerator"].update(count=-1), "resources.accelerator.count"),
        (lambda r: r["resources"]["accelerator"].update(milli=0), "resources.accelerator.milli"),
        (lambda r: r["resources"]["accelerator"].update(milli=1000), "resources.accelerator.milli"),
        (
            lambda r: r["resources"]["accelerator"].update(milli=250, count=2),
            "resources.accelerator.milli",
        ),
        (
            lambda r: r["resources"]["accelerator"].update(milli=250.5),
            "resources.accelerator.milli",
        ),
        (
            lambda r: (
                r["resources"]["accelerator"].update(milli=250),
                r["resources"].update(nodes=2),
            ),
            "resources.nodes",
        ),
        (
            lambda r: r["resources"]["accelerator"].update(memory_gib=0),
            "resources.accelerator.memory_gib",
        ),
        (
            lambda r: r["resources"]["accelerator"].update(memory_gib=float("nan")),
            "resources.accelerator.memory_gib",
        ),
        (
            lambda r: r["resources"]["accelerator"].update(memory_gib=80),
            "resources.accelerator.memory_gib",
        ),
        (
            lambda r: r["resources"]["accelerator"].update(memory_gib=79.99),
            "resources.accelerator.memory_gib",
        ),
        (
            lambda r: r["resources"]["accelerator"].update(memory_gib="20"),
            "resources.accelerator.memory_gib",
        ),
        (
            lambda r: r["resources"]["accelerator"].update(memory_gib=20, milli=250),
            "resources.accelerator.memory_gib",
        ),
        (
            lambda r: r["resources"]["accelerator"].update(memory_gib=20, count=2),
            "resources.accelerator.memory_gib",
        ),
        (
            lambda r: r["resources"]["accelerator"].update(memory_gib=20, model="B200"),
            "resources.accelerator.memory_gib",
        ),
        (
            lambda r: (
                r["resources"]["accelerator"].update(memory_gib=20),
                r["resources"].update(nodes=2),
            ),
            "resources.nodes",
        ),
        (lambda r: r["resources"].update(cpu=-2), "resources.cpu"),
        (lambda r: r["objective"].update(cost="cheap"), "objective.cost"),
        (lambda r: r["objective"].update(latency="1"), "objective.latency"),
        (lambda r: r.update(duration_hours=0), "duration_hours"),
        (lambda r: r.pop("source_province"), "source_province"),
        (lambda r: r.update(priority=11), "priority"),
        (lambda r: r.update(colour="red"), "colour"),
        (
            lambda r: r["constraints"].update(interconnect="carrier-pigeon"),
            "constraints.interconnect",
        ),
    ],
)
def test_malformed_request_names_the_field(change: Any, field: str) -> None:
    raw = good()
    change(raw)
    with pytest.raises(RequestError) as info:
        parse_request(raw)
    assert info.value.field == field
    assert str(info.value).startswith(field)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r.update(source_province="ZZ"), "source_province"),
        (lambda r: r.update(access_node="BB-acc"), "access_node"),
        (
            lambda r: r["resources"]["accelerator"].update(model="B9000"),
            "resources.accelerator.model",
        ),
        (
            lambda r: r["constraints"].update(regions_allowed=["AA", "nowhere"]),
            "constraints.regions_allowed[1]",
        ),
        (
            lambda r: r["constraints"].update(regions_denied=["mars"]),
            "constraints.regions_denied[0]",
        ),
    ],
)
def test_request_unknown_to_the_map_names_the_field(
    tiny_map: ComputeNetworkMap, change: Any, field: str
) -> None:
    raw = good()
    change(raw)
    request = parse_request(raw)
    with pytest.raises(RequestError) as info:
        check_request(request, tiny_map)
    assert info.value.field == field


def test_bad_request_in_a_batch_reserves_nothing(tiny_map: ComputeNetworkMap) -> None:
    engine = PlacementEngine(tiny_map)
    ok = parse_request(good())
    bad = parse_request({**good(), "source_province": "ZZ"})
    with pytest.raises(RequestError):
        engine.place_batch([ok, bad])
    assert engine.ledger.reservations == {}
    assert engine.ledger.version == 0


def test_not_an_object() -> None:
    with pytest.raises(RequestError, match="JSON object"):
        parse_request([1, 2])
