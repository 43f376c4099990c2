"""Peer reservations: the parts of cross-brain reservations a brain owns, taken in two phases.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "peer_reservations",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("site_id", sa.String(length=128), nullable=True),
        sa.Column("cpu_m", sa.BigInteger(), nullable=False),
        sa.Column("mem_mib", sa.BigInteger(), nullable=False),
        sa.Column("storage_gib", sa.BigInteger(), nullable=False),
        sa.Column("accelerator_model", sa.String(length=32), nullable=True),
        sa.Column("accelerator_count", sa.BigInteger(), nullable=False),
        sa.Column("mbps", sa.BigInteger(), nullable=False),
        sa.Column("counts_quota", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decision", sa.JSON(), nullable=True),
        sa.Column("request", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["site_id"], ["sites.id"], name=op.f("fk_peer_reservations_site_id_sites")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_peer_reservations")),
    )
    with op.batch_alter_table("peer_reservations", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_peer_reservations_expires_at"), ["expires_at"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_peer_reservations_request_id"), ["request_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_peer_reservations_site_id"), ["site_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_peer_reservations_state"), ["state"], unique=False)

    op.create_table(
        "peer_reservation_links",
        sa.Column("reservation_id", sa.String(length=64), nullable=False),
        sa.Column("link_id", sa.String(length=260), nullable=False),
        sa.ForeignKeyConstraint(
            ["link_id"], ["links.id"], name=op.f("fk_peer_reservation_links_link_id_links")
        ),
        sa.ForeignKeyConstraint(
            ["reservation_id"],
            ["peer_reservations.id"],
            name=op.f("fk_peer_reservation_links_reservation_id_peer_reservations"),
        ),
        sa.PrimaryKeyConstraint(
            "reservation_id", "link_id", name=op.f("pk_peer_reservation_links")
        ),
    )
    with op.batch_alter_table("peer_reservation_links", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_peer_reservation_links_link_id"), ["link_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("peer_reservation_links", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_peer_reservation_links_link_id"))

    op.drop_table("peer_reservation_links")
    with op.batch_alter_table("peer_reservations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_peer_reservations_state"))
        batch_op.drop_index(batch_op.f("ix_peer_reservations_site_id"))
        batch_op.drop_index(batch_op.f("ix_peer_reservations_request_id"))
        batch_op.drop_index(batch_op.f("ix_peer_reservations_expires_at"))

    op.drop_table("peer_reservations")
