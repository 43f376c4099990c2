"""Initial schema: tenants, users, API keys, quotas, the map registry with its capacity
ledger, requests, decisions, reservations, usage records, the audit log and the weight matrix.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = (
    "tenants",
    "users",
    "api_keys",
    "quotas",
    "map_frame",
    "sites",
    "site_capacity",
    "site_accelerators",
    "links",
    "link_capacity",
    "placement_requests",
    "decisions",
    "reservations",
    "reservation_links",
    "usage_records",
    "audit_log",
    "weight_matrix",
)
"""Every table, parents before children."""


def upgrade() -> None:
    """Create every table of `cnbrain.storage.models` with its keys, constraints and indexes."""
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=True),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_users_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
    )
    op.create_index(op.f("ix_users_tenant_id"), "users", ["tenant_id"], unique=False)
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_api_keys_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
    )
    op.create_index(op.f("ix_api_keys_user_id"), "api_keys", ["user_id"], unique=False)
    op.create_table(
        "quotas",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("limit_cpu_m", sa.BigInteger(), nullable=True),
        sa.Column("limit_mem_mib", sa.BigInteger(), nullable=True),
        sa.Column("limit_accelerators", sa.BigInteger(), nullable=True),
        sa.Column("limit_mbps", sa.BigInteger(), nullable=True),
        sa.Column("limit_active_requests", sa.Integer(), nullable=True),
        sa.Column("used_cpu_m", sa.BigInteger(), nullable=False),
        sa.Column("used_mem_mib", sa.BigInteger(), nullable=False),
        sa.Column("used_accelerators", sa.BigInteger(), nullable=False),
        sa.Column("used_mbps", sa.BigInteger(), nullable=False),
        sa.Column("active_requests", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_quotas_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_quotas")),
    )
    op.create_table(
        "map_frame",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_map_frame")),
    )
    op.create_table(
        "sites",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("province", sa.String(length=32), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sites")),
        sa.UniqueConstraint("position", name=op.f("uq_sites_position")),
    )
    op.create_index(op.f("ix_sites_province"), "sites", ["province"], unique=False)
    op.create_table(
        "site_capacity",
        sa.Column("site_id", sa.String(length=128), nullable=False),
        sa.Column("cpu_m_cap", sa.BigInteger(), nullable=False),
        sa.Column("cpu_m_used", sa.BigInteger(), nullable=False),
        sa.Column("cpu_m_external", sa.BigInteger(), nullable=False),
        sa.Column("mem_mib_cap", sa.BigInteger(), nullable=False),
        sa.Column("mem_mib_used", sa.BigInteger(), nullable=False),
        sa.Column("mem_mib_external", sa.BigInteger(), nullable=False),
        sa.Column("storage_gib_cap", sa.BigInteger(), nullable=False),
        sa.Column("storage_gib_used", sa.BigInteger(), nullable=False),
        sa.Column("storage_gib_external", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["site_id"], ["sites.id"], name=op.f("fk_site_capacity_site_id_sites")
        ),
        sa.PrimaryKeyConstraint("site_id", name=op.f("pk_site_capacity")),
    )
    op.create_table(
        "site_accelerators",
        sa.Column("site_id", sa.String(length=128), nullable=False),
        sa.Column("model", sa.String(length=32), nullable=False),
        sa.Column("cap", sa.BigInteger(), nullable=False),
        sa.Column("used", sa.BigInteger(), nullable=False),
        sa.Column("external", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["site_id"], ["sites.id"], name=op.f("fk_site_accelerators_site_id_sites")
        ),
        sa.PrimaryKeyConstraint("site_id", "model", name=op.f("pk_site_accelerators")),
    )
    op.create_table(
        "links",
        sa.Column("id", sa.String(length=260), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_links")),
        sa.UniqueConstraint("position", name=op.f("uq_links_position")),
    )
    op.create_table(
        "link_capacity",
        sa.Column("link_id", sa.String(length=260), nullable=False),
        sa.Column("mbps_cap", sa.BigInteger(), nullable=False),
        sa.Column("mbps_used", sa.BigInteger(), nullable=False),
        sa.Column("mbps_external", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["link_id"], ["links.id"], name=op.f("fk_link_capacity_link_id_links")
        ),
        sa.PrimaryKeyConstraint("link_id", name=op.f("pk_link_capacity")),
    )
    op.create_table(
        "placement_requests",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("site_id", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_placement_requests_tenant_id_tenants")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_placement_requests_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_placement_requests")),
        sa.UniqueConstraint(
            "tenant_id",
            "idempotency_key",
            name=op.f("uq_placement_requests_tenant_id_idempotency_key"),
        ),
    )
    op.create_index(
        op.f("ix_placement_requests_created_at"), "placement_requests", ["created_at"], unique=False
    )
    op.create_index(
        op.f("ix_placement_requests_state"), "placement_requests", ["state"], unique=False
    )
    op.create_index(
        "ix_placement_requests_tenant_created",
        "placement_requests",
        ["tenant_id", "created_at", "id"],
        unique=False,
    )
    op.create_table(
        "decisions",
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["placement_requests.id"],
            name=op.f("fk_decisions_request_id_placement_requests"),
        ),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_decisions")),
    )
    op.create_table(
        "reservations",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("site_id", sa.String(length=128), nullable=False),
        sa.Column("cpu_m", sa.BigInteger(), nullable=False),
        sa.Column("mem_mib", sa.BigInteger(), nullable=False),
        sa.Column("storage_gib", sa.BigInteger(), nullable=False),
        sa.Column("accelerator_model", sa.String(length=32), nullable=True),
        sa.Column("accelerator_count", sa.BigInteger(), nullable=False),
        sa.Column("mbps", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["placement_requests.id"],
            name=op.f("fk_reservations_request_id_placement_requests"),
        ),
        sa.ForeignKeyConstraint(
            ["site_id"], ["sites.id"], name=op.f("fk_reservations_site_id_sites")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_reservations_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reservations")),
    )
    op.create_index(
        op.f("ix_reservations_request_id"), "reservations", ["request_id"], unique=False
    )
    op.create_index(op.f("ix_reservations_site_id"), "reservations", ["site_id"], unique=False)
    op.create_index(op.f("ix_reservations_state"), "reservations", ["state"], unique=False)
    op.create_index(op.f("ix_reservations_tenant_id"), "reservations", ["tenant_id"], unique=False)
    op.create_table(
        "reservation_links",
        sa.Column("reservation_id", sa.String(length=64), nullable=False),
        sa.Column("link_id", sa.String(length=260), nullable=False),
        sa.ForeignKeyConstraint(
            ["link_id"], ["links.id"], name=op.f("fk_reservation_links_link_id_links")
        ),
        sa.ForeignKeyConstraint(
            ["reservation_id"],
            ["reservations.id"],
            name=op.f("fk_reservation_links_reservation_id_reservations"),
        ),
        sa.PrimaryKeyConstraint("reservation_id", "link_id", name=op.f("pk_reservation_links")),
    )
    op.create_index(
        op.f("ix_reservation_links_link_id"), "reservation_links", ["link_id"], unique=False
    )
    op.create_table(
        "usage_records",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("site_id", sa.String(length=128), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cpu_core_hours", sa.Double(), nullable=False),
        sa.Column("memory_gib_hours", sa.Double(), nullable=False),
        sa.Column("accelerator_hours", sa.Double(), nullable=False),
        sa.Column("cost_cny", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["placement_requests.id"],
            name=op.f("fk_usage_records_request_id_placement_requests"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_usage_records_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_records")),
    )
    op.create_index(
        op.f("ix_usage_records_request_id"), "usage_records", ["request_id"], unique=False
    )
    op.create_index(
        op.f("ix_usage_records_tenant_id"), "usage_records", ["tenant_id"], unique=False
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=True),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("object_type", sa.String(length=32), nullable=False),
        sa.Column("object_id", sa.String(length=260), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index(op.f("ix_audit_log_at"), "audit_log", ["at"], unique=False)
    op.create_index(op.f("ix_audit_log_tenant_id"), "audit_log", ["tenant_id"], unique=False)
    op.create_table(
        "weight_matrix",
        sa.Column("workload_class", sa.String(length=16), nullable=False),
        sa.Column("cost", sa.Double(), nullable=False),
        sa.Column("latency", sa.Double(), nullable=False),
        sa.Column("energy", sa.Double(), nullable=False),
        sa.Column("balance", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("workload_class", name=op.f("pk_weight_matrix")),
    )


def downgrade() -> None:
    """Drop every table (their indexes and constraints go with them), children first."""
    for table in reversed(TABLES):
        op.drop_table(table)
