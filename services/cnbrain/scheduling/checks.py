"""Checks of the names and numbers the scheduling values are built from.

Each check returns its value or raises `cnbrain.domain.errors.Invalid` naming the field.
"""

import math

from cnbrain.domain import bounds
from cnbrain.domain.errors import Invalid


def checked_name(value: object, *, field: str, max_length: int = bounds.MAX_NAME_LENGTH) -> str:
    """`value` when it is a non-empty string of at most `max_length` characters without
    control characters."""
    if not isinstance(value, str):
        raise Invalid("must be a string", field=field)
    if not value:
        raise Invalid("must not be empty", field=field)
    if len(value) > max_length:
        raise Invalid(f"must be at most {max_length} characters", field=field)
    if bounds.has_control_characters(value):
        raise Invalid("must not contain control characters", field=field)
    return value


def checked_int(value: object, *, field: str, low: int, high: int) -> int:
    """`value` when it is an int (not a bool) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid("must be an integer", field=field)
    if not low <= value <= high:
        raise Invalid(f"must be between {low} and {high}", field=field)
    return value


def checked_number(value: object, *, field: str, low: float, high: float) -> float:
    """`value` as a float when it is a finite int or float (not a bool) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid("must be a number", field=field)
    number = float(value)
    if not math.isfinite(number):
        raise Invalid("must be a finite number", field=field)
    if not low <= number <= high:
        raise Invalid(f"must be between {low:g} and {high:g}", field=field)
    return number
