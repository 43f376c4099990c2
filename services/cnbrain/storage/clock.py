"""The time the stores write and read: UTC."""

import math
from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, as an aware datetime in UTC."""
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """`moment` in UTC; naive times (SQLite hands them back) are taken as UTC, which every
    stored time is."""
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def moment_of(epoch_s: int) -> datetime:
    """Epoch second `epoch_s` as an aware datetime in UTC, as a stored time."""
    return datetime.fromtimestamp(epoch_s, UTC)


def epoch_s(moment: datetime) -> int:
    """The epoch second of a stored time (the inverse of `moment_of`; a fraction of a second
    is dropped)."""
    return math.floor(as_utc(moment).timestamp())
