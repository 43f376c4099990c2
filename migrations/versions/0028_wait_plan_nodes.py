"""The nodes of a waiting request's plan, so that the gangs planned on a site are booked on
its nodes (`wait_plans.nodes`).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | Sequence[str] | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("wait_plans") as batch_op:
        batch_op.add_column(sa.Column("nodes", sa.Integer(), server_default="1", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("wait_plans") as batch_op:
        batch_op.drop_column("nodes")
