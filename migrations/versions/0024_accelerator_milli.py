"""The ledger counts accelerators in thousandths of one, so that fractions of one count.

Every stored amount of accelerators the ledger keeps is multiplied by 1000, and the columns
that hold one are named for the unit: `accelerator_count` becomes `accelerator_milli` in
`reservations`, `peer_reservations` and `room_holds`; the quota columns `*_accelerators`
become `*_acc_milli`; `site_accelerators` keeps its names (`cap`, `used`, `external`). The
accelerator dimensions of fair shares (`accelerator:<model>`) and the accelerator pools in
the demand of the national brain's wait plans are multiplied too. Going down divides, and a
fraction of one accelerator rounds up to a whole one.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06
"""

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | Sequence[str] | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MILLI = 1000

_RENAMED = (
    ("reservations", "accelerator_count", "accelerator_milli"),
    ("peer_reservations", "accelerator_count", "accelerator_milli"),
    ("room_holds", "accelerator_count", "accelerator_milli"),
    ("quotas", "limit_accelerators", "limit_acc_milli"),
    ("quotas", "used_accelerators", "used_acc_milli"),
    ("quotas", "national_accelerators", "national_acc_milli"),
)
_SCALED = (
    ("site_accelerators", "cap"),
    ("site_accelerators", "used"),
    ("site_accelerators", "external"),
)

_FAIR_SHARES = sa.table(
    "fair_shares",
    sa.column("tenant_id", sa.String()),
    sa.column("nominal", sa.JSON()),
    sa.column("borrowing_limit", sa.JSON()),
)
_WAIT_PLANS = sa.table(
    "wait_plans", sa.column("request_id", sa.String()), sa.column("demand", sa.JSON())
)


def _up(amount: int) -> int:
    return amount * MILLI


def _down(amount: int) -> int:
    return -(-amount // MILLI)


def _scale_columns(sql: str) -> None:
    for table, _, column in _RENAMED:
        op.execute(f"UPDATE {table} SET {column} = {sql.format(column=column)}")
    for table, column in _SCALED:
        op.execute(f"UPDATE {table} SET {column} = {sql.format(column=column)}")


def _scale_documents(scale: Callable[[int], int]) -> None:
    bind = op.get_bind()
    for tenant_id, nominal, borrowing in bind.execute(
        sa.select(_FAIR_SHARES.c.tenant_id, _FAIR_SHARES.c.nominal, _FAIR_SHARES.c.borrowing_limit)
    ):
        bind.execute(
            _FAIR_SHARES.update()
            .where(_FAIR_SHARES.c.tenant_id == tenant_id)
            .values(nominal=_vector(nominal, scale), borrowing_limit=_vector(borrowing, scale))
        )
    for request_id, demand in bind.execute(
        sa.select(_WAIT_PLANS.c.request_id, _WAIT_PLANS.c.demand)
    ):
        scaled = [
            [key, scale(amount) if len(key) == 4 and key[2] == "acc" else amount]
            for key, amount in demand
        ]
        bind.execute(
            _WAIT_PLANS.update().where(_WAIT_PLANS.c.request_id == request_id).values(demand=scaled)
        )


def _vector(amounts: dict[str, Any], scale: Callable[[int], int]) -> dict[str, Any]:
    return {
        dimension: scale(amount) if dimension.startswith("accelerator:") else amount
        for dimension, amount in amounts.items()
    }


def upgrade() -> None:
    for table, old, new in _RENAMED:
        op.execute(f"ALTER TABLE {table} RENAME COLUMN {old} TO {new}")
    _scale_columns("{column} * 1000")
    _scale_documents(_up)


def downgrade() -> None:
    _scale_columns("({column} + 999) / 1000")
    _scale_documents(_down)
    for table, old, new in _RENAMED:
        op.execute(f"ALTER TABLE {table} RENAME COLUMN {new} TO {old}")
