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
