"""The national brain's state in its database: the regions it knows and the cross-region
placements it has under way, so a restart (or a crash) of the national brain loses neither.

- `known_regions`: one row per registered region: its brain's endpoint and its provinces.
- `inflight_placements`: one row per cross-region reservation whose parts are being prepared
  or committed, with its request and the owners of its parts; deleted once its outcome is
  decided.

Downgrading drops both tables: the previous release keeps them in memory only.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "known_regions",
        sa.Column("region_id", sa.String(length=64), nullable=False),
        sa.Column("endpoint", sa.String(length=255), nullable=False),
        sa.Column("provinces", sa.JSON(), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("region_id", name=op.f("pk_known_regions")),
    )
    op.create_table(
        "inflight_placements",
        sa.Column("reservation_id", sa.String(length=64), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("owners", sa.JSON(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("reservation_id", name=op.f("pk_inflight_placements")),
    )


def downgrade() -> None:
    op.drop_table("inflight_placements")
    op.drop_table("known_regions")
