"""The numbers of a region's summary as the national brain checks them: a summary the region
makes passes; each kind of wrong number is refused naming its field."""

import math
from collections.abc import Callable

import pytest

from cnbrain.domain import bounds
from cnbrain.federation.codec import WireError
from cnbrain.federation.summary_numbers import MAX_ENTRIES, check_summary_numbers
from cnbrain.v1 import national_pb2


def _summary() -> national_pb2.RegionSummary:
    return national_pb2.RegionSummary(
        region_id="east",
        accelerators=[national_pb2.AcceleratorSummary(model="A100", free=1_000, total=4_000)],
        site_kinds=[
            national_pb2.SiteKindSummary(kind="hub", sites=2, free_cpu_m=64_000, free_mem_mib=1)
        ],
        cpu_price_min=0.1,
        cpu_price_max=0.3,
        gateways=[national_pb2.GatewayLoad(province="AA", gateway="AA-gw", utilisation=0.5)],
    )


def test_a_summary_of_sound_numbers_passes() -> None:
    check_summary_numbers(_summary())
    check_summary_numbers(national_pb2.RegionSummary(region_id="east"))  # no site at all


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda s: setattr(s.accelerators[0], "free", 5_000), "summary.accelerators[0].free"),
        (lambda s: setattr(s.accelerators[0], "free", -1), "summary.accelerators[0].free"),
        (lambda s: setattr(s.accelerators[0], "total", -1), "summary.accelerators[0].total"),
        (lambda s: setattr(s.site_kinds[0], "sites", -1), "summary.site_kinds[0].sites"),
        (
            lambda s: setattr(s.site_kinds[0], "free_cpu_m", -5),
            "summary.site_kinds[0].free_cpu_m",
        ),
        (lambda s: setattr(s, "cpu_price_max", math.inf), "summary.cpu_price_max"),
        (lambda s: setattr(s, "cpu_price_min", math.nan), "summary.cpu_price_min"),
        (lambda s: setattr(s, "cpu_price_min", 0.5), "summary.cpu_price_min"),
        (
            lambda s: setattr(s, "cpu_price_max", bounds.MAX_PRICE_CNY * 2),
            "summary.cpu_price_max",
        ),
        (
            lambda s: setattr(s.gateways[0], "utilisation", math.nan),
            "summary.gateways[0].utilisation",
        ),
        (
            lambda s: setattr(s.gateways[0], "utilisation", 1.5),
            "summary.gateways[0].utilisation",
        ),
        (
            lambda s: s.gateways.extend([national_pb2.GatewayLoad(province="AA")] * MAX_ENTRIES),
            "summary.gateways",
        ),
    ],
)
def test_a_wrong_number_is_refused_naming_its_field(
    change: Callable[[national_pb2.RegionSummary], None], field: str
) -> None:
    summary = _summary()
    change(summary)
    with pytest.raises(WireError) as refused:
        check_summary_numbers(summary)
    assert refused.value.field == field
