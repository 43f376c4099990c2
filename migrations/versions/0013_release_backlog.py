"""The release backlog: releases the national brain owes an owner, kept in its database so a
restart does not forget them.

- `release_backlog`: one row per (owner, reservation) whose part the owner could not release
  when asked, with the reason to release it with, and since when it is owed.

Downgrading drops the table: the previous release keeps that list in memory only.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "release_backlog",
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("reservation_id", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", "reservation_id", name=op.f("pk_release_backlog")),
    )


def downgrade() -> None:
    op.drop_table("release_backlog")
