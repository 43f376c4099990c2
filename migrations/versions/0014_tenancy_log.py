"""The federation's tenancy log: the changes of tenants, users, API keys (their ids and
secret hashes) and quotas the national brain records, each with its version, and that every
regional brain takes in that order.

- `tenancy_log`: one row per change (`cnbrain.domain.tenancy`) by version.

Downgrading drops the table: the previous release keeps tenancy in each brain alone.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tenancy_log",
        sa.Column("version", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("change", sa.JSON(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("version", name=op.f("pk_tenancy_log")),
    )


def downgrade() -> None:
    op.drop_table("tenancy_log")
