"""Request events: what happened to each request, event by event (`request_events`), for
`GET /v1/requests/{id}/events`.

Requests stored before this revision have no events; the brain writes them from now on.
Downgrading drops the table (the previous release keeps no events).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "request_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["placement_requests.id"],
            name=op.f("fk_request_events_request_id_placement_requests"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_request_events")),
    )
    op.create_index(
        "ix_request_events_request_at", "request_events", ["request_id", "at", "id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_request_events_request_at", table_name="request_events")
    op.drop_table("request_events")
