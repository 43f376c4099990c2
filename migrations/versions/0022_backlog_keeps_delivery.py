"""A release the national brain owes keeps whether the part's delivery flows stay held
(`release_backlog.keep_delivery`: its job completed).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | Sequence[str] | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("release_backlog") as batch_op:
        batch_op.add_column(
            sa.Column("keep_delivery", sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("release_backlog") as batch_op:
        batch_op.drop_column("keep_delivery")
