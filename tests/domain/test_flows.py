"""The flow model of a request: every field validated, bounded and named when refused."""

import math

import pytest
from pydantic import ValidationError

from cnbrain.domain import bounds
from cnbrain.domain.flows import Delivery, Endpoint, Flows, Serving, Staging


def _refused(model: type, data: object) -> str:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)  # type: ignore[attr-defined]
    error = info.value.errors()[0]
    return ".".join(str(part) for part in error["loc"])


def test_a_full_flow_model_parses() -> None:
    flows = Flows.model_validate(
        {
            "staging": [
                {"source": {"site": "SH-hub-qingpu"}, "volume_gb": 2000, "max_rate_gbps": 10},
                {"source": {"province": "BJ"}, "volume_gb": 50.5, "mode": "stream"},
            ],
            "delivery": [{"destination": {"province": "ZJ"}, "volume_gb": 100}],
            "serving": {"provinces": ["SH", "ZJ"], "rate_gbps": 1.5, "max_latency_ms": 20},
        }
    )
    assert not flows.empty
    assert flows.staging[0].mode == "before_start"
    assert flows.staging[1].max_rate_gbps is None
    assert [str(s.source) for s in flows.staging] == ["site SH-hub-qingpu", "province BJ"]
    assert Flows().empty


@pytest.mark.parametrize("end", [{}, {"site": "a", "province": "B"}])
def test_an_endpoint_names_exactly_one_of_site_and_province(end: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match="exactly one of site and province"):
        Endpoint.model_validate(end)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"source": {"site": "s"}, "volume_gb": 0}, "volume_gb"),
        ({"source": {"site": "s"}, "volume_gb": -1}, "volume_gb"),
        ({"source": {"site": "s"}, "volume_gb": bounds.MAX_VOLUME_GB * 2}, "volume_gb"),
        ({"source": {"site": "s"}, "volume_gb": math.inf}, "volume_gb"),
        ({"source": {"site": "s"}, "volume_gb": math.nan}, "volume_gb"),
        ({"source": {"site": "s"}, "volume_gb": "5"}, "volume_gb"),
        ({"source": {"site": "s"}, "volume_gb": 1, "max_rate_gbps": 0}, "max_rate_gbps"),
        ({"source": {"site": "s"}, "volume_gb": 1, "max_rate_gbps": 1e7}, "max_rate_gbps"),
        ({"source": {"site": "s"}, "volume_gb": 1, "mode": "later"}, "mode"),
        ({"source": {"site": ""}, "volume_gb": 1}, "source.site"),
        ({"source": {"site": "s\x00"}, "volume_gb": 1}, "source.site"),
        ({"source": {"site": "s"}, "volume_gb": 1, "speed": 3}, "speed"),
    ],
)
def test_a_bad_staging_names_its_field(data: object, field: str) -> None:
    assert _refused(Staging, data) == field


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"provinces": [], "rate_gbps": 1, "max_latency_ms": 20}, "provinces"),
        ({"provinces": ["SH"], "rate_gbps": 0, "max_latency_ms": 20}, "rate_gbps"),
        ({"provinces": ["SH"], "rate_gbps": 1, "max_latency_ms": 0}, "max_latency_ms"),
        ({"provinces": ["SH"], "rate_gbps": 1, "max_latency_ms": math.inf}, "max_latency_ms"),
        ({"provinces": ["SH"] * 300, "rate_gbps": 1, "max_latency_ms": 1}, "provinces"),
    ],
)
def test_a_bad_serving_names_its_field(data: object, field: str) -> None:
    assert _refused(Serving, data) == field


def test_serving_provinces_do_not_repeat_and_flows_are_bounded() -> None:
    with pytest.raises(ValidationError, match="must not repeat"):
        Serving(provinces=("SH", "SH"), rate_gbps=1.0, max_latency_ms=5.0)
    one = {"destination": {"province": "SH"}, "volume_gb": 1}
    assert _refused(Flows, {"delivery": [one] * (bounds.MAX_FLOWS + 1)}) == "delivery"
    assert _refused(Delivery, {"destination": {"province": "SH"}, "volume_gb": 0}) == "volume_gb"
