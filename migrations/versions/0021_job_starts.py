"""When a placed request's job may start (`job_starts`): once the data it stages is on its
site.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | Sequence[str] | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_starts",
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("start_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["placement_requests.id"],
            name=op.f("fk_job_starts_request_id_placement_requests"),
        ),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_job_starts")),
    )


def downgrade() -> None:
    op.drop_table("job_starts")
