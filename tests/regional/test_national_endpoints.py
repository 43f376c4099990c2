"""A regional brain's settings name the national brain's replicas: one endpoint or several,
each host:port once; anything else is refused naming the setting."""

import pytest
from pydantic import ValidationError

from cnbrain.regional.settings import Settings


def test_the_replicas_of_the_national_brain_in_the_order_given() -> None:
    assert Settings().national_endpoints == []
    assert Settings(national_endpoint=" ").national_endpoints == []
    assert Settings(national_endpoint="n1:50051").national_endpoints == ["n1:50051"]
    both = Settings(national_endpoint="n1:50051, n2:50052")
    assert both.national_endpoints == ["n1:50051", "n2:50052"]


@pytest.mark.parametrize("wrong", ["n1", "n1:0", "n1:1,n1:1", "n1:1,,n2:2", "n 1:1", "x" * 2049])
def test_a_wrong_endpoint_list_is_refused_naming_the_setting(wrong: str) -> None:
    with pytest.raises(ValidationError, match="national_endpoint"):
        Settings(national_endpoint=wrong)
