"""Reservation windows: every reservation and cross-brain part holds over [start_at, end_at).

- Upgrade: `reservations` and `peer_reservations` gain `start_at` and `end_at` (timestamps,
  not null). An existing row starts when it was created (to the second) and ends its
  request's duration later (`duration_hours`, rounded up to a whole second): the request
  of this brain it names for a reservation; for a part, the request its commit recorded, or
  else this brain's request of that id. When the duration is unknown (a prepared part of
  another brain's request, a request without a valid duration), the row ends the longest
  duration a request may ask later (`MAX_DURATION_HOURS`, as `cnbrain.domain.bounds` had it
  when this was written), so it holds until it is released, as it did before.
  On SQLite the columns keep the default they were added with (the epoch, written over in
  every row; no write uses it): SQLite changes a column's default or nullability only by
  copying its table, which it refuses while other tables' rows refer to it.
- Downgrade: both columns are dropped.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MAX_DURATION_HOURS = 10**5
"""The longest duration a request may ask, in hours: the end of a row of unknown duration."""

_TABLES = ("reservations", "peer_reservations")
_COLUMNS = ("start_at", "end_at")
_TIME = sa.DateTime(timezone=True)
_SQLITE_PLACEHOLDER = "1970-01-01 00:00:00.000000"
_REQUESTS = sa.table("placement_requests", sa.column("id", sa.String), sa.column("body", sa.JSON))


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for table in _TABLES:
        for column in _COLUMNS:
            # SQLite adds a NOT NULL column only with a default; it cannot drop that default
            # (nor make the column NOT NULL later) without copying the table, which it refuses
            # while other tables' rows refer to it. The placeholder is written over below and
            # every write sets both columns.
            op.add_column(
                table,
                sa.Column(
                    column,
                    _TIME,
                    nullable=not sqlite,
                    server_default=_SQLITE_PLACEHOLDER if sqlite else None,
                ),
            )
    _fill_reservations()
    _fill_parts()
    if not sqlite:
        for table in _TABLES:
            for column in _COLUMNS:
                op.alter_column(table, column, existing_type=_TIME, nullable=False)


def downgrade() -> None:
    # Not in batch mode: SQLite (3.35 and later) drops such a column in place.
    for table in _TABLES:
        for column in reversed(_COLUMNS):
            op.drop_column(table, column)


def _fill_reservations() -> None:
    rows = sa.table(
        "reservations",
        sa.column("id", sa.String),
        sa.column("request_id", sa.String),
        sa.column("created_at", _TIME),
        *(sa.column(column, _TIME) for column in _COLUMNS),
    )
    found = (
        op.get_bind()
        .execute(
            sa.select(rows.c.id, rows.c.created_at, _REQUESTS.c.body).join(
                _REQUESTS, _REQUESTS.c.id == rows.c.request_id, isouter=True
            )
        )
        .all()
    )
    _write(rows, [(rid, created, _duration_hours(body)) for rid, created, body in found])


def _fill_parts() -> None:
    rows = sa.table(
        "peer_reservations",
        sa.column("id", sa.String),
        sa.column("request_id", sa.String),
        sa.column("request", sa.JSON),
        sa.column("created_at", _TIME),
        *(sa.column(column, _TIME) for column in _COLUMNS),
    )
    found = (
        op.get_bind()
        .execute(
            sa.select(rows.c.id, rows.c.created_at, rows.c.request, _REQUESTS.c.body).join(
                _REQUESTS, _REQUESTS.c.id == rows.c.request_id, isouter=True
            )
        )
        .all()
    )
    _write(
        rows,
        [
            (rid, created, _duration_hours(recorded) or _duration_hours(body))
            for rid, created, recorded, body in found
        ],
    )


def _write(rows: sa.TableClause, windows: Sequence[tuple[str, datetime, float | None]]) -> None:
    """Set the window of each (id, created_at, duration in hours or None) with one
    statement for all of them."""
    if not windows:
        return
    values = []
    for rid, created, hours in windows:
        start = _whole_second(created)
        length = math.ceil((hours if hours is not None else MAX_DURATION_HOURS) * 3600)
        values.append({"rid": rid, "s": start, "e": start + timedelta(seconds=max(1, length))})
    op.get_bind().execute(
        sa.update(rows)
        .where(rows.c.id == sa.bindparam("rid"))
        .values(start_at=sa.bindparam("s", type_=_TIME), end_at=sa.bindparam("e", type_=_TIME)),
        values,
    )


def _duration_hours(document: object) -> float | None:
    """The valid `duration_hours` of a stored request (a JSON object, or its text), or None."""
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except json.JSONDecodeError:
            return None
    if not isinstance(document, dict):
        return None
    hours = document.get("duration_hours")
    if isinstance(hours, bool) or not isinstance(hours, int | float):
        return None
    return float(hours) if 0 < hours <= MAX_DURATION_HOURS else None


def _whole_second(moment: datetime) -> datetime:
    """`moment` in UTC (naive times, as SQLite hands them back, are UTC) to the second."""
    aware = moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return aware.replace(microsecond=0)
