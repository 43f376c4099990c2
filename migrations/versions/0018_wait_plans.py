"""The national brain's plans of waiting cross-region requests (`wait_plans`), so that a
request is planned where no other waiting request's plan stands, whichever replica plans it.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "wait_plans",
        sa.Column("request_id", sa.String(length=64), primary_key=True),
        sa.Column("source_region", sa.String(length=64), nullable=False),
        sa.Column("demand", sa.JSON(), nullable=False),
        sa.Column("start_at", _TIME, nullable=False),
        sa.Column("end_at", _TIME, nullable=False),
        sa.Column("planned_at", _TIME, nullable=False),
    )
    op.create_index("ix_wait_plans_end_at", "wait_plans", ["end_at"])
    op.create_index("ix_wait_plans_planned_at", "wait_plans", ["planned_at"])


def downgrade() -> None:
    op.drop_index("ix_wait_plans_planned_at", table_name="wait_plans")
    op.drop_index("ix_wait_plans_end_at", table_name="wait_plans")
    op.drop_table("wait_plans")
