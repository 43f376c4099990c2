"""Disabled users: `users.disabled_at` (NULL: active). A disabled user's keys do not
authenticate.

Downgrading drops the column: the previous release has no disabled users, so it revokes the
keys of every disabled user first, and they stay unusable.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("users", sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.execute(
        "UPDATE api_keys SET revoked_at = (SELECT disabled_at FROM users"
        " WHERE users.id = api_keys.user_id)"
        " WHERE revoked_at IS NULL AND user_id IN"
        " (SELECT id FROM users WHERE disabled_at IS NOT NULL)"
    )
    # In place, not by copying the table: other tables refer to users (SQLite 3.35+).
    op.drop_column("users", "disabled_at")
