"""Room holds: compute on a site, freed by preemption for a request of another region's
queue, that this brain's admission round leaves to it for a short while.

- `room_holds`: one row per such request: the site, the compute and until when.

Downgrading drops the table: the previous release makes no room for other regions, and a
hold only delays this brain's own admissions by its few seconds.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "room_holds",
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("site_id", sa.String(length=128), nullable=False),
        sa.Column("cpu_m", sa.BigInteger(), nullable=False),
        sa.Column("mem_mib", sa.BigInteger(), nullable=False),
        sa.Column("storage_gib", sa.BigInteger(), nullable=False),
        sa.Column("accelerator_model", sa.String(length=32), nullable=True),
        sa.Column("accelerator_count", sa.BigInteger(), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["site_id"], ["sites.id"], name=op.f("fk_room_holds_site_id_sites")
        ),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_room_holds")),
    )
    op.create_index(op.f("ix_room_holds_until"), "room_holds", ["until"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_room_holds_until"), table_name="room_holds")
    op.drop_table("room_holds")
