"""The admission queue: requests may wait `queued`; the plans of the queue and the leases of
a brain's single duties are stored.

- `leases`: one row per duty that one instance of a brain does at a time (the admission
  loop): who holds it, and until when.
- `queue_plans`: one row per queued request, written by the admission round: its position,
  its estimated start, and what blocks it.

Requests already stored keep their states (none is queued before this revision). Downgrading
drops both tables; a request still queued then would be in a state the previous release does
not know, so the downgrade refuses while any request is queued.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("until", _TIME, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leases")),
    )
    op.create_table(
        "queue_plans",
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("estimated_start_at", _TIME, nullable=True),
        sa.Column("planned_at", _TIME, nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["placement_requests.id"],
            name=op.f("fk_queue_plans_request_id_placement_requests"),
        ),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_queue_plans")),
    )


def downgrade() -> None:
    queued = (
        op.get_bind()
        .execute(sa.text("SELECT count(*) FROM placement_requests WHERE state = 'queued'"))
        .scalar_one()
    )
    if queued:
        raise RuntimeError(
            f"{queued} requests are queued; cancel them or let them be admitted first"
        )
    op.drop_table("queue_plans")
    op.drop_table("leases")
