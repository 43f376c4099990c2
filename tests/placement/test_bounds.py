"""The domain's bounds: requests, sites and links beyond them are refused naming the field, and
at the bounds every conversion to the reserved units fits the database's 64-bit columns."""

import math
from typing import Any

import pytest
from pydantic import ValidationError

from cnbrain.domain import bounds
from cnbrain.domain.enums import LinkLayer
from cnbrain.domain.network import Link
from cnbrain.domain.site import Capacity, Prices
from cnbrain.netmap.arrays import cores_to_millicores, gbps_to_mbps, gib_to_mib, whole_gib
from cnbrain.placement.errors import RequestError
from cnbrain.placement.request_check import parse_request

BASE: dict[str, Any] = {
    "source_province": "GD",
    "resources": {"cpu": 8, "memory_gib": 32},
    "duration_hours": 2,
}
INT64_MAX = 2**63 - 1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"resources": {"cpu": math.inf, "memory_gib": 1}}, "resources.cpu"),
        ({"resources": {"cpu": 1e18, "memory_gib": 1}}, "resources.cpu"),
        ({"resources": {"cpu": 1, "memory_gib": math.nan}}, "resources.memory_gib"),
        ({"duration_hours": 1e308}, "duration_hours"),
        ({"constraints": {"min_bandwidth_gbps": 1e300}}, "constraints.min_bandwidth_gbps"),
        ({"objective": {"balance": 1e308}}, "objective.balance"),
        ({"objective": {"cost": math.inf}}, "objective.cost"),
        (
            {
                "resources": {
                    "cpu": 1,
                    "memory_gib": 1,
                    "accelerator": {"model": "T4", "count": 2**70},
                }
            },
            "resources.accelerator.count",
        ),
        ({"source_province": "G\u0000D"}, "source_province"),
        ({"tenant": "acme\u0007"}, "tenant"),
        ({"id": "req-\u0000"}, "id"),
        ({"constraints": {"regions_denied": ["x\u001f"]}}, "constraints.regions_denied.0"),
    ],
)
def test_a_request_beyond_the_bounds_is_refused_naming_the_field(
    change: dict[str, Any], field: str
) -> None:
    with pytest.raises(RequestError) as refused:
        parse_request({**BASE, **change})
    assert refused.value.field == field


def test_a_request_at_the_bounds_is_accepted() -> None:
    request = parse_request(
        {
            **BASE,
            "resources": {
                "cpu": bounds.MAX_CPU_CORES,
                "memory_gib": bounds.MAX_MEMORY_GIB,
                "storage_gib": bounds.MAX_STORAGE_GIB,
                "accelerator": {"model": "H800", "count": bounds.MAX_ACCELERATORS},
            },
            "constraints": {
                "max_latency_ms": bounds.MAX_LATENCY_MS,
                "min_bandwidth_gbps": bounds.MAX_BANDWIDTH_GBPS,
            },
            "duration_hours": bounds.MAX_DURATION_HOURS,
            "objective": {"cost": bounds.MAX_WEIGHT},
        }
    )
    assert request.resources.cpu == bounds.MAX_CPU_CORES


def test_sites_and_links_beyond_the_bounds_are_refused() -> None:
    with pytest.raises(ValidationError, match="cpu_cores"):
        Capacity(cpu_cores=9e60, memory_gib=1)
    with pytest.raises(ValidationError, match="finite"):
        Capacity(cpu_cores=1, memory_gib=math.inf)
    with pytest.raises(ValidationError, match="accelerators"):
        Capacity(cpu_cores=1, memory_gib=1, accelerators={"A100": 2**70})
    with pytest.raises(ValidationError, match="cpu_core_hour"):
        Prices(cpu_core_hour=math.inf, memory_gib_hour=0)
    for bandwidth in (2.8e16, math.inf):
        with pytest.raises(ValidationError, match="bandwidth_gbps"):
            Link(a="x", b="y", layer=LinkLayer.ACCESS, bandwidth_gbps=bandwidth, latency_ms=1)
    with pytest.raises(ValidationError, match="control characters"):
        Link(a="x\u0000", b="y", layer=LinkLayer.ACCESS, bandwidth_gbps=1, latency_ms=1)


def test_the_largest_quota_and_map_fit_the_64_bit_columns() -> None:
    assert cores_to_millicores(bounds.MAX_QUOTA_CPU_CORES) <= INT64_MAX
    assert gib_to_mib(bounds.MAX_QUOTA_MEMORY_GIB) <= INT64_MAX
    assert whole_gib(bounds.MAX_SITES * bounds.MAX_STORAGE_GIB) <= INT64_MAX
    assert gbps_to_mbps(bounds.MAX_QUOTA_BANDWIDTH_GBPS) <= INT64_MAX
    assert bounds.MAX_QUOTA_ACCELERATORS <= INT64_MAX
    assert bounds.MAX_QUOTA_ACTIVE_REQUESTS < 2**31
    # The costliest request at the dearest prices stays a finite float.
    hours = bounds.MAX_DURATION_HOURS
    cost = (
        bounds.MAX_PRICE_CNY
        * hours
        * (bounds.MAX_CPU_CORES + bounds.MAX_MEMORY_GIB + bounds.MAX_ACCELERATORS)
    )
    assert math.isfinite(cost * bounds.MAX_WEIGHT)
