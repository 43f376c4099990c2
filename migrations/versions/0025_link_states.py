"""Operators' reports of the state of links (`link_states`).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | Sequence[str] | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "link_states",
        sa.Column("link_id", sa.String(length=260), nullable=False),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["link_id"], ["links.id"], name=op.f("fk_link_states_link_id_links")
        ),
        sa.PrimaryKeyConstraint("link_id", name=op.f("pk_link_states")),
    )


def downgrade() -> None:
    op.drop_table("link_states")
