"""What each site's scheduler last reported free on the site's node pools (`node_reports`).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | Sequence[str] | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "node_reports",
        sa.Column("site_id", sa.String(length=128), nullable=False),
        sa.Column("pools", sa.JSON(), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["site_id"], ["sites.id"], name=op.f("fk_node_reports_site_id_sites")
        ),
        sa.PrimaryKeyConstraint("site_id", name=op.f("pk_node_reports")),
    )


def downgrade() -> None:
    op.drop_table("node_reports")
