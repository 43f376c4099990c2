"""Wire forms of priority classes and their sets (`cnbrain.v1.national_pb2`) and back; what
a peer sends is checked as an operator's input is."""

from collections.abc import Sequence
from typing import Final

from cnbrain.domain.errors import Invalid
from cnbrain.federation.codec import WireError
from cnbrain.scheduling.classes import PriorityClass, PriorityClasses, check_class_name
from cnbrain.v1 import national_pb2

MAX_WIRE_CLASSES: Final = 1000
"""Classes one set on the wire holds at most."""


def class_message(one: PriorityClass) -> national_pb2.PriorityClass:
    return national_pb2.PriorityClass(
        name=one.name,
        value=one.value,
        preemptible=one.preemptible,
        default_max_wait_s=one.default_max_wait_s,
    )


def class_of(
    message: national_pb2.PriorityClass, *, field: str = "priority_class"
) -> PriorityClass:
    """The class `message` carries. Raises WireError naming the field at fault (its name,
    value or max wait out of bounds)."""
    try:
        check_class_name(message.name, field="name")
        return PriorityClass(
            name=message.name,
            value=message.value,
            preemptible=message.preemptible,
            default_max_wait_s=message.default_max_wait_s,
        )
    except Invalid as wrong:
        raise WireError(wrong.message, field=f"{field}.{wrong.field}") from None


def set_message(
    classes: PriorityClasses, *, known_digest: str = ""
) -> national_pb2.PriorityClassSet:
    """`classes` with its digest; only the digest when it is `known_digest`."""
    digest = classes.digest()
    if digest == known_digest:
        return national_pb2.PriorityClassSet(digest=digest)
    return national_pb2.PriorityClassSet(
        digest=digest,
        classes=[class_message(one) for one in classes],
        default_class=classes.default.name,
    )


def set_of(message: national_pb2.PriorityClassSet) -> PriorityClasses:
    """The set `message` carries. Raises WireError when it holds more than
    `MAX_WIRE_CLASSES` classes, a class out of bounds, two classes of one name or value, a
    default that names none of them, or a digest that is not the set's."""
    wire: Sequence[national_pb2.PriorityClass] = message.classes
    if len(wire) > MAX_WIRE_CLASSES:
        raise WireError(f"at most {MAX_WIRE_CLASSES} classes, not {len(wire)}", field="classes")
    try:
        classes = PriorityClasses(
            (class_of(one, field=f"classes[{i}]") for i, one in enumerate(wire)),
            default=message.default_class,
        )
    except WireError:
        raise
    except Invalid as wrong:
        raise WireError(wrong.message, field=wrong.field) from None
    if classes.digest() != message.digest:
        raise WireError("is not the digest of the classes sent", field="digest")
    return classes
