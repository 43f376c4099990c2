"""Priority classes on the wire: a set goes and comes back equal, and what a peer sends is
checked as an operator's input is (each refusal names the field)."""

import math

import pytest

from cnbrain.federation.class_wire import MAX_WIRE_CLASSES, class_of, set_message, set_of
from cnbrain.federation.codec import WireError
from cnbrain.scheduling.classes import BUILT_IN
from cnbrain.v1 import national_pb2


def test_a_set_comes_back_equal_and_a_known_one_is_only_its_digest() -> None:
    message = set_message(BUILT_IN)
    back = set_of(message)
    assert list(back) == list(BUILT_IN)
    assert back.default.name == "normal"
    known = set_message(BUILT_IN, known_digest=BUILT_IN.digest())
    assert known.digest == BUILT_IN.digest()
    assert not known.classes
    assert not known.default_class


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": ""}, "priority_class.name"),
        ({"name": "a/b"}, "priority_class.name"),
        ({"name": "x" * 64}, "priority_class.name"),
        ({"value": 10**9 + 1}, "priority_class.value"),
        ({"default_max_wait_s": math.nan}, "priority_class.default_max_wait_s"),
        ({"default_max_wait_s": math.inf}, "priority_class.default_max_wait_s"),
        ({"default_max_wait_s": -1.0}, "priority_class.default_max_wait_s"),
    ],
)
def test_a_class_out_of_bounds_is_refused_naming_the_field(
    fields: dict[str, object], field: str
) -> None:
    good = {"name": "urgent", "value": 990, "preemptible": False, "default_max_wait_s": 60.0}
    with pytest.raises(WireError) as raised:
        class_of(national_pb2.PriorityClass(**{**good, **fields}))  # type: ignore[arg-type]
    assert raised.value.field == field


def _tampered(**changes: object) -> national_pb2.PriorityClassSet:
    message = set_message(BUILT_IN)
    for name, value in changes.items():
        if name == "classes":
            del message.classes[:]
            message.classes.extend(value)  # type: ignore[arg-type]
        else:
            setattr(message, name, value)
    return message


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (_tampered(digest="0" * 64), "digest"),
        (_tampered(default_class="urgent"), "default"),
        (_tampered(classes=[]), "classes"),
        (
            _tampered(
                classes=[
                    national_pb2.PriorityClass(name="a", value=1, default_max_wait_s=0),
                    national_pb2.PriorityClass(name="normal", value=1, default_max_wait_s=0),
                ]
            ),
            "classes[1].value",
        ),
        (
            _tampered(
                classes=[
                    national_pb2.PriorityClass(name=f"c{i}", value=i, default_max_wait_s=0)
                    for i in range(MAX_WIRE_CLASSES + 1)
                ]
            ),
            "classes",
        ),
        (
            _tampered(
                classes=[national_pb2.PriorityClass(name="normal", value=1, default_max_wait_s=-1)]
            ),
            "classes[0].default_max_wait_s",
        ),
    ],
)
def test_a_set_that_is_not_one_is_refused_naming_the_field(
    message: national_pb2.PriorityClassSet, field: str
) -> None:
    with pytest.raises(WireError) as raised:
        set_of(message)
    assert raised.value.field == field
