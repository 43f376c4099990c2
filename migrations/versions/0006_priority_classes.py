"""Priority classes: the operators' classes of requests, one table.

The brain stores its built-in classes into the empty table when it starts
(`cnbrain.storage.priority_classes.seed_if_empty`), not this migration.

Downgrading drops the table, and takes the fields the previous release does not know
(`priority_class`, `max_wait_s`, `start`) out of the stored requests (`placement_requests.body`,
`peer_reservations.request`), which that release refuses otherwise: every request is then of
the default class, as there. Upgrading needs no rewrite: a stored request without them has
their defaults.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "priority_classes",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("value", sa.Integer(), nullable=False),
        sa.Column("preemptible", sa.Boolean(), nullable=False),
        sa.Column("default_max_wait_s", sa.Double(), nullable=False),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_priority_classes")),
        sa.UniqueConstraint("value", name=op.f("uq_priority_classes_value")),
    )


_NEW_FIELDS = ("priority_class", "max_wait_s", "start")
_STORED_REQUESTS = (("placement_requests", "body"), ("peer_reservations", "request"))


def downgrade() -> None:
    op.drop_table("priority_classes")
    strip = _strip_postgresql if op.get_bind().dialect.name == "postgresql" else _strip_sqlite
    for table, column in _STORED_REQUESTS:
        op.execute(strip(table, column))


def _strip_postgresql(table: str, column: str) -> str:
    removed = "".join(f" - '{name}'" for name in _NEW_FIELDS)
    keys = ", ".join(f"'{name}'" for name in _NEW_FIELDS)
    return (
        f"UPDATE {table} SET {column} = ({column}::jsonb{removed})::json"
        f" WHERE json_typeof({column}) = 'object' AND {column}::jsonb ?| array[{keys}]"
    )


def _strip_sqlite(table: str, column: str) -> str:
    paths = ", ".join(f"'$.{name}'" for name in _NEW_FIELDS)
    found = " OR ".join(f"json_type({column}, '$.{name}') IS NOT NULL" for name in _NEW_FIELDS)
    return (
        f"UPDATE {table} SET {column} = json_remove({column}, {paths})"
        f" WHERE json_type({column}) = 'object' AND ({found})"
    )
