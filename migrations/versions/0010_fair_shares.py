"""Fair shares: each tenant's weight in the admission order, and its cohort with its nominal
quota and borrowing limit there, one table.

- `fair_shares`: one row per tenant whose terms differ from the defaults (weight 1, no
  cohort); `nominal` and `borrowing_limit` are resource vectors as {dimension: amount} in the
  ledger's units.

Downgrading drops the table, and with it the stored terms: the previous release has none.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fair_shares",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("weight", sa.Double(), server_default="1", nullable=False),
        sa.Column("cohort", sa.String(length=63), nullable=True),
        sa.Column("nominal", sa.JSON(), nullable=False),
        sa.Column("borrowing_limit", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_fair_shares_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_fair_shares")),
    )


def downgrade() -> None:
    op.drop_table("fair_shares")
