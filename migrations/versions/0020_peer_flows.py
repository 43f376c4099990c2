"""Flows of cross-brain parts: a flow (`reservation_flows`) belongs to a held reservation or
to a part of a cross-brain reservation (`peer_reservations`), so `reservation_id` no longer
refers to `reservations`.

Going down drops the flows of parts, which the table cannot hold below this revision.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from alembic import op

revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FOREIGN_KEY = "fk_reservation_flows_reservation_id_reservations"
_OF_NO_RESERVATION = (
    "SELECT f.id FROM reservation_flows AS f"
    " WHERE NOT EXISTS (SELECT 1 FROM reservations AS r WHERE r.id = f.reservation_id)"
)


@contextmanager
def _routes_aside() -> Iterator[None]:
    """On SQLite, the rows of `reservation_flow_links` kept in a temporary table while
    `reservation_flows` is rebuilt: with foreign keys on, that table cannot be dropped while
    rows refer to it, and the pragma that turns them off does nothing in a transaction."""
    if op.get_bind().dialect.name != "sqlite":
        yield
        return
    op.execute("CREATE TEMPORARY TABLE flow_routes_aside AS SELECT * FROM reservation_flow_links")
    op.execute("DELETE FROM reservation_flow_links")
    yield
    op.execute("INSERT INTO reservation_flow_links SELECT * FROM flow_routes_aside")
    op.execute("DROP TABLE flow_routes_aside")


def upgrade() -> None:
    with _routes_aside(), op.batch_alter_table("reservation_flows") as table:
        table.drop_constraint(op.f(_FOREIGN_KEY), type_="foreignkey")


def downgrade() -> None:
    op.execute(f"DELETE FROM reservation_flow_links WHERE flow_id IN ({_OF_NO_RESERVATION})")
    op.execute(f"DELETE FROM reservation_flows WHERE id IN ({_OF_NO_RESERVATION})")
    with _routes_aside(), op.batch_alter_table("reservation_flows") as table:
        table.create_foreign_key(op.f(_FOREIGN_KEY), "reservations", ["reservation_id"], ["id"])
