"""The national brain's replicas: each placement under way names the replica deciding it, so
a live replica releases the placements of one that stopped (its lease in `leases` lapsed).

Rows recorded before name no replica (''): the first replica to start releases them.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("inflight_placements") as table:
        table.add_column(
            sa.Column("replica", sa.String(length=64), nullable=False, server_default="")
        )


def downgrade() -> None:
    with op.batch_alter_table("inflight_placements") as table:
        table.drop_column("replica")
