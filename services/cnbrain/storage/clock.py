"""The time the stores write and read: UTC."""

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, as an aware datetime in UTC."""
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """`moment` in UTC; naive times (SQLite hands them back) are taken as UTC, which every
    stored time is."""
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
