"""The flows of reservations (`reservation_flows`, their routes in `reservation_flow_links`):
bandwidth on links over windows of their own (staging before a job starts, delivery after it
ends), counted by the calendar.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "reservation_flows",
        sa.Column("id", sa.String(length=80), nullable=False),
        sa.Column("reservation_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("peer", sa.String(length=128), nullable=False),
        sa.Column("mbps", sa.BigInteger(), nullable=False),
        sa.Column("start_at", _TIME, nullable=False),
        sa.Column("end_at", _TIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["reservation_id"],
            ["reservations.id"],
            name=op.f("fk_reservation_flows_reservation_id_reservations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reservation_flows")),
    )
    op.create_index(
        op.f("ix_reservation_flows_reservation_id"),
        "reservation_flows",
        ["reservation_id"],
        unique=False,
    )
    op.create_index(
        op.f("ix_reservation_flows_end_at"), "reservation_flows", ["end_at"], unique=False
    )
    op.create_table(
        "reservation_flow_links",
        sa.Column("flow_id", sa.String(length=80), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("link_id", sa.String(length=260), nullable=False),
        sa.ForeignKeyConstraint(
            ["flow_id"],
            ["reservation_flows.id"],
            name=op.f("fk_reservation_flow_links_flow_id_reservation_flows"),
        ),
        sa.ForeignKeyConstraint(
            ["link_id"], ["links.id"], name=op.f("fk_reservation_flow_links_link_id_links")
        ),
        sa.PrimaryKeyConstraint("flow_id", "position", name=op.f("pk_reservation_flow_links")),
    )
    op.create_index(
        op.f("ix_reservation_flow_links_link_id"),
        "reservation_flow_links",
        ["link_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_reservation_flow_links_link_id"), table_name="reservation_flow_links")
    op.drop_table("reservation_flow_links")
    op.drop_index(op.f("ix_reservation_flows_end_at"), table_name="reservation_flows")
    op.drop_index(op.f("ix_reservation_flows_reservation_id"), table_name="reservation_flows")
    op.drop_table("reservation_flows")
