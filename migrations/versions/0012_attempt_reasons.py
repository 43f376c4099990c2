"""Attempt reasons: why the brain ended an attempt, when it was the brain's doing.

- `jobs.reason`: null, or `preempted` for an attempt whose request was preempted while it
  was under way (it ends as its scheduler says, say `cancelled`, and does not count toward
  the job's `max_attempts`).

Attempts already stored have no reason: each counts, as before. Downgrading drops the column,
and with it the mark: the previous release counts every attempt.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reason", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("reason")
