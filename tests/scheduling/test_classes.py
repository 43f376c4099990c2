"""Priority classes: their checks, and the set's default and lookup."""

import math

import pytest

from cnbrain.domain.errors import Invalid
from cnbrain.scheduling.classes import (
    MAX_CLASS_VALUE,
    MAX_WAIT_S,
    PriorityClass,
    PriorityClasses,
)


def test_a_class_keeps_its_fields() -> None:
    one = PriorityClass("interactive", 1000, False, 30)
    assert (one.name, one.value, one.preemptible, one.default_max_wait_s) == (
        "interactive",
        1000,
        False,
        30.0,
    )
    assert isinstance(one.default_max_wait_s, float)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "x" * 64}, "name"),
        ({"name": "bad\nname"}, "name"),
        ({"value": MAX_CLASS_VALUE + 1}, "value"),
        ({"value": True}, "value"),
        ({"value": 1.5}, "value"),
        ({"preemptible": 1}, "preemptible"),
        ({"default_max_wait_s": -1}, "default_max_wait_s"),
        ({"default_max_wait_s": MAX_WAIT_S + 1}, "default_max_wait_s"),
        ({"default_max_wait_s": math.nan}, "default_max_wait_s"),
    ],
)
def test_a_bad_class_is_invalid_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    fields: dict[str, object] = {
        "name": "batch",
        "value": 0,
        "preemptible": True,
        "default_max_wait_s": 60,
    }
    fields.update(kwargs)
    with pytest.raises(Invalid) as raised:
        PriorityClass(**fields)  # type: ignore[arg-type]
    assert raised.value.field == field


def classes() -> PriorityClasses:
    return PriorityClasses(
        [
            PriorityClass("batch", 0, True, 3600),
            PriorityClass("critical", 100, False, 0),
            PriorityClass("standard", 10, True, 600),
        ],
        default="standard",
    )


def test_the_set_looks_classes_up_by_name_and_gives_the_default_for_none() -> None:
    known = classes()
    assert known.get("critical").value == 100
    assert known.get(None) is known.default
    assert known.default.name == "standard"
    assert "batch" in known
    assert "nightly" not in known
    assert [one.name for one in known] == ["critical", "standard", "batch"]
    assert len(known) == 3


def test_an_unknown_class_is_invalid_and_names_the_known_ones() -> None:
    with pytest.raises(Invalid, match="unknown class 'nightly'; known: critical, standard, batch"):
        classes().get("nightly")


@pytest.mark.parametrize(
    ("members", "default", "field"),
    [
        ([PriorityClass("a", 1, True, 0), PriorityClass("a", 2, True, 0)], "a", "classes[1].name"),
        ([PriorityClass("a", 1, True, 0), PriorityClass("b", 1, True, 0)], "a", "classes[1].value"),
        ([], "a", "classes"),
        ([PriorityClass("a", 1, True, 0)], "b", "default"),
    ],
)
def test_a_bad_set_is_invalid(members: list[PriorityClass], default: str, field: str) -> None:
    with pytest.raises(Invalid) as raised:
        PriorityClasses(members, default=default)
    assert raised.value.field == field


def test_a_stored_request_naming_no_class_of_the_set_gets_the_default() -> None:
    classes = PriorityClasses(
        [PriorityClass("high", 9, False, 0), PriorityClass("normal", 5, True, 60)],
        default="normal",
    )
    assert classes.named_or_default("high").name == "high"
    for name in (None, "deleted", 7, ""):
        assert classes.named_or_default(name).name == "normal"


def test_equal_sets_have_equal_digests_and_any_change_changes_it() -> None:
    high, normal = PriorityClass("high", 9, False, 0), PriorityClass("normal", 5, True, 60)
    digest = PriorityClasses([high, normal], default="normal").digest()
    assert PriorityClasses([normal, high], default="normal").digest() == digest
    assert PriorityClasses([high, normal], default="high").digest() != digest
    assert (
        PriorityClasses([high, PriorityClass("normal", 5, True, 61)], default="normal").digest()
        != digest
    )
    assert (
        PriorityClasses([high, PriorityClass("normal", 5, False, 60)], default="normal").digest()
        != digest
    )
    assert (
        PriorityClasses([PriorityClass("high", 8, False, 0), normal], default="normal").digest()
        != digest
    )
