"""What each reservation or cross-brain part takes of the nodes of a site's node pools
(`node_takes`).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "node_takes",
        sa.Column("holder_id", sa.String(length=64), nullable=False),
        sa.Column("pool", sa.Integer(), nullable=False),
        sa.Column("node", sa.Integer(), nullable=False),
        sa.Column("site_id", sa.String(length=128), nullable=False),
        sa.Column("devices", sa.Integer(), nullable=False),
        sa.Column("shared", sa.Integer(), nullable=False),
        sa.Column("milli", sa.Integer(), nullable=False),
        sa.Column("cpu_m", sa.BigInteger(), nullable=False),
        sa.Column("mem_mib", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["site_id"], ["sites.id"], name=op.f("fk_node_takes_site_id_sites")
        ),
        sa.PrimaryKeyConstraint("holder_id", "pool", "node", name=op.f("pk_node_takes")),
    )
    op.create_index(op.f("ix_node_takes_site_id"), "node_takes", ["site_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_node_takes_site_id"), table_name="node_takes")
    op.drop_table("node_takes")
