"""The national brain's settings hold what production runs with, and no fault injection."""

import pytest
from pydantic import ValidationError

from cnbrain.national.settings import NationalSettings


def test_the_national_brain_has_no_pause_between_prepare_and_commit() -> None:
    with pytest.raises(ValidationError, match="commit_delay_ms"):
        NationalSettings(commit_delay_ms=3_000)  # type: ignore[call-arg]


@pytest.mark.parametrize("word", ["delay", "fault", "inject"])
def test_no_setting_of_the_national_brain_injects_faults(word: str) -> None:
    assert not [name for name in NationalSettings.model_fields if word in name]


def test_a_replica_is_named_by_a_short_id_and_keeps_a_bounded_lease() -> None:
    assert NationalSettings(instance_id="national-2").instance_id == "national-2"
    assert len(NationalSettings().instance_id) <= 48
    for wrong in ["", "a b", "x" * 49, "national/1"]:
        with pytest.raises(ValidationError, match="instance_id"):
            NationalSettings(instance_id=wrong)
    for wrong_s in [0.1, 3601.0, float("inf"), float("nan")]:
        with pytest.raises(ValidationError, match="replica_lease_s"):
            NationalSettings(replica_lease_s=wrong_s)
