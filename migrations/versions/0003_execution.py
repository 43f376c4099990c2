"""Execution: each site's cluster scheduler, the attempts of each request's job, and usage
records from the schedulers' accounting.

- `sites.execution`: the site's `BackendRef` as JSON (NULL: the default simulator).
- `jobs`: one row per attempt of a request's job (request id, attempt number), with its
  scheduler's job id, state, times, and the brain instance that follows it.
- `usage_records`: the attempt it meters, the allocated resources and elapsed time as the
  scheduler's accounting has them, the network and compute parts of the cost, the accounting
  it came from and whether it was a simulator; one record per attempt.

Downgrading drops all of that; requests submitted to a scheduler go back to `placed`,
suspended ones to `running`, and the `job` part is removed from stored requests, so the
previous release can read every row.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("site_id", sa.String(length=128), nullable=False),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("backend_job_id", sa.String(length=64), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("backend_state", sa.String(length=64), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("owner", sa.String(length=200), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("metered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["placement_requests.id"],
            name=op.f("fk_jobs_request_id_placement_requests"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_jobs_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("request_id", "attempt", name=op.f("pk_jobs")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_state_owner", ["state", "owner"], unique=False)
        batch_op.create_index(batch_op.f("ix_jobs_tenant_id"), ["tenant_id"], unique=False)

    with op.batch_alter_table("sites", schema=None) as batch_op:
        batch_op.add_column(sa.Column("execution", sa.JSON(), nullable=True))

    zero = "0"
    with op.batch_alter_table("usage_records", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempt", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("backend_job_id", sa.String(length=64), nullable=True))
        batch_op.add_column(
            sa.Column("elapsed_s", sa.Double(), server_default=zero, nullable=False)
        )
        batch_op.add_column(sa.Column("cpus", sa.Integer(), server_default=zero, nullable=False))
        batch_op.add_column(
            sa.Column("memory_mib", sa.BigInteger(), server_default=zero, nullable=False)
        )
        batch_op.add_column(sa.Column("gpus", sa.Integer(), server_default=zero, nullable=False))
        batch_op.add_column(sa.Column("accelerator_model", sa.String(length=32), nullable=True))
        batch_op.add_column(
            sa.Column("bandwidth_gbps", sa.Double(), server_default=zero, nullable=False)
        )
        batch_op.add_column(
            sa.Column("compute_cost_cny", sa.Double(), server_default=zero, nullable=False)
        )
        batch_op.add_column(
            sa.Column("network_cost_cny", sa.Double(), server_default=zero, nullable=False)
        )
        batch_op.add_column(sa.Column("source", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("simulated", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.add_column(sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(batch_op.f("ix_usage_records_ended_at"), ["ended_at"], unique=False)
        batch_op.create_index(
            "ix_usage_records_tenant_ended", ["tenant_id", "ended_at"], unique=False
        )
        batch_op.create_unique_constraint(
            batch_op.f("uq_usage_records_request_id_attempt"), ["request_id", "attempt"]
        )
        batch_op.create_foreign_key(
            batch_op.f("fk_usage_records_request_id_jobs"),
            "jobs",
            ["request_id", "attempt"],
            ["request_id", "attempt"],
        )


def downgrade() -> None:
    with op.batch_alter_table("usage_records", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_usage_records_request_id_jobs"), type_="foreignkey")
        batch_op.drop_constraint(batch_op.f("uq_usage_records_request_id_attempt"), type_="unique")
        batch_op.drop_index("ix_usage_records_tenant_ended")
        batch_op.drop_index(batch_op.f("ix_usage_records_ended_at"))
        for column in (
            "recorded_at",
            "simulated",
            "source",
            "network_cost_cny",
            "compute_cost_cny",
            "bandwidth_gbps",
            "accelerator_model",
            "gpus",
            "memory_mib",
            "cpus",
            "elapsed_s",
            "backend_job_id",
            "attempt",
        ):
            batch_op.drop_column(column)

    with op.batch_alter_table("sites", schema=None) as batch_op:
        batch_op.drop_column("execution")

    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_tenant_id"))
        batch_op.drop_index("ix_jobs_state_owner")
    op.drop_table("jobs")

    op.execute("UPDATE placement_requests SET state = 'placed' WHERE state = 'submitted'")
    op.execute("UPDATE placement_requests SET state = 'running' WHERE state = 'suspended'")
    _drop_job_parts()


def _drop_job_parts() -> None:
    """Remove the `job` key from stored requests (the previous release refuses unknown keys)."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE placement_requests SET body = (body::jsonb - 'job')::json")
        op.execute(
            "UPDATE peer_reservations SET request = (request::jsonb - 'job')::json "
            "WHERE request IS NOT NULL"
        )
    else:
        op.execute("UPDATE placement_requests SET body = json_remove(body, '$.job')")
        op.execute(
            "UPDATE peer_reservations SET request = json_remove(request, '$.job') "
            "WHERE request IS NOT NULL"
        )
