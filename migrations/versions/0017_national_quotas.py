"""Quotas at two levels: a regional brain keeps a copy of the federation's national limits
of each tenant beside its region's own (`quotas.national_*`); the national brain's own
limits (`quotas.limit_*`) become the national ones, which its ledger enforces.

A national brain's database (one that knows regions) held copies of the regions' limits
there; they are cleared, so no tenant starts with a national limit it was never given.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NATIONAL = (
    ("national_cpu_m", sa.BigInteger()),
    ("national_mem_mib", sa.BigInteger()),
    ("national_accelerators", sa.BigInteger()),
    ("national_mbps", sa.BigInteger()),
    ("national_active_requests", sa.Integer()),
)
_LIMITS = (
    "limit_cpu_m",
    "limit_mem_mib",
    "limit_accelerators",
    "limit_mbps",
    "limit_active_requests",
)


def upgrade() -> None:
    with op.batch_alter_table("quotas") as table:
        for name, kind in _NATIONAL:
            table.add_column(sa.Column(name, kind, nullable=True))
    cleared = ", ".join(f"{name} = NULL" for name in _LIMITS)
    op.execute(f"UPDATE quotas SET {cleared} WHERE EXISTS (SELECT 1 FROM known_regions)")


def downgrade() -> None:
    with op.batch_alter_table("quotas") as table:
        for name, _ in _NATIONAL:
            table.drop_column(name)
