"""Priority classes: set by operators, each a name, a value, preemptible or not, a max wait.

A request names its class; the class's value orders the queue (higher first) and decides who
may preempt whom (only a higher value preempts, and only preemptible work). Two classes of
one set never share a value, so "a lower class" and "a lower value" are the same thing.
"""

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from cnbrain.domain import bounds
from cnbrain.domain.errors import Invalid
from cnbrain.scheduling.checks import checked_int, checked_name, checked_number

MAX_CLASS_NAME_LENGTH: Final = 63
"""A class name is short: at most this many characters (a DNS label's length)."""

NAME_PATTERN: Final = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_CLASS_NAME_LENGTH - 1}}}$")
"""A class name as operators give it: a letter or digit, then letters, digits, '.', '_' or
'-'; at most `MAX_CLASS_NAME_LENGTH` characters (it is a path segment of the API)."""

MIN_CLASS_VALUE: Final = -(10**9)
MAX_CLASS_VALUE: Final = 10**9
"""A class value is an integer within these bounds."""

MAX_WAIT_S: Final = bounds.MAX_DURATION_HOURS * 3600
"""The longest max wait, in seconds: as long as a request may hold its resources."""


def check_class_name(name: str, *, field: str = "name") -> None:
    """Raise `Invalid` naming `field` unless `name` matches `NAME_PATTERN`."""
    if not NAME_PATTERN.fullmatch(name):
        raise Invalid(
            f"must be 1 to {MAX_CLASS_NAME_LENGTH} letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
            field=field,
        )


@dataclass(frozen=True, slots=True)
class PriorityClass:
    """One class. `value` orders it among the others (higher first); `preemptible` says
    whether higher classes may preempt its work; `default_max_wait_s` is how long a request
    of this class waits to start before it may preempt, when it names no max wait itself.

    Raises `Invalid` naming the field: a name that is empty, longer than
    `MAX_CLASS_NAME_LENGTH` or holds control characters; a value that is not an integer
    within [`MIN_CLASS_VALUE`, `MAX_CLASS_VALUE`]; a max wait outside [0, `MAX_WAIT_S`]."""

    name: str
    value: int
    preemptible: bool
    default_max_wait_s: float

    def __post_init__(self) -> None:
        checked_name(self.name, field="name", max_length=MAX_CLASS_NAME_LENGTH)
        checked_int(self.value, field="value", low=MIN_CLASS_VALUE, high=MAX_CLASS_VALUE)
        if not isinstance(self.preemptible, bool):
            raise Invalid("must be a boolean", field="preemptible")
        wait = checked_number(
            self.default_max_wait_s, field="default_max_wait_s", low=0, high=MAX_WAIT_S
        )
        object.__setattr__(self, "default_max_wait_s", wait)


class PriorityClasses:
    """The operators' set of classes, with the class of a request that names none.

    Raises `Invalid` naming the field when two classes share a name or a value, when the set
    is empty, or when `default` names no class of the set."""

    __slots__ = ("_by_name", "_default")

    def __init__(self, classes: Iterable[PriorityClass], *, default: str) -> None:
        by_name: dict[str, PriorityClass] = {}
        values: dict[int, str] = {}
        for index, one in enumerate(classes):
            if one.name in by_name:
                raise Invalid(f"class {one.name!r} is named twice", field=f"classes[{index}].name")
            if one.value in values:
                raise Invalid(
                    f"value {one.value} is already the value of class {values[one.value]!r}",
                    field=f"classes[{index}].value",
                )
            by_name[one.name] = one
            values[one.value] = one.name
        if not by_name:
            raise Invalid("at least one class is needed", field="classes")
        if default not in by_name:
            raise Invalid(f"names no class of the set: {default!r}", field="default")
        ordered = sorted(by_name.values(), key=lambda one: -one.value)
        self._by_name = MappingProxyType({one.name: one for one in ordered})
        self._default = by_name[default]

    @property
    def default(self) -> PriorityClass:
        """The class of a request that names none."""
        return self._default

    def get(self, name: str | None) -> PriorityClass:
        """The class called `name`, or the default class for None. Raises `Invalid` (field
        `priority_class`) for a name no class has."""
        if name is None:
            return self._default
        found = self._by_name.get(name)
        if found is None:
            known = ", ".join(self._by_name)
            raise Invalid(f"unknown class {name!r}; known: {known}", field="priority_class")
        return found

    def named_or_default(self, name: object) -> PriorityClass:
        """The class called `name`, or the default class when `name` names none of the set
        (None, a class since deleted, anything that is not a name): how the admission queue
        classes a stored request."""
        found = self._by_name.get(name) if isinstance(name, str) else None
        return self._default if found is None else found

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[PriorityClass]:
        """The classes, highest value first."""
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def digest(self) -> str:
        """A digest of the set: equal sets (the same classes, the same default), equal
        digests."""
        document = {
            "classes": [
                [one.name, one.value, one.preemptible, one.default_max_wait_s] for one in self
            ],
            "default": self._default.name,
        }
        return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


_HOUR_S: Final = 3600.0

BUILT_IN: Final = PriorityClasses(
    (
        PriorityClass(name="low", value=100, preemptible=True, default_max_wait_s=24 * _HOUR_S),
        PriorityClass(name="normal", value=500, preemptible=True, default_max_wait_s=24 * _HOUR_S),
        PriorityClass(name="high", value=900, preemptible=False, default_max_wait_s=_HOUR_S),
    ),
    default="normal",
)
"""The classes a brain starts with (`docs/scheduling.md`): `normal` the default, `low` for
work that may wait and give way, `high` for work that waits at most an hour and is never
preempted."""
