"""Site credentials: a Slurm site names a credential of the brain's store, not where a token is.

- Upgrade: a stored Slurm `execution` that names `token_file` or `token_env` loses them and
  names the credential `migrated` instead, so every site stays readable and the brain starts;
  its jobs are not submitted ("no credential 'migrated' in this brain's credential store")
  until the deployment configures that credential or an admin names another one.
- Downgrade: a stored `credential` becomes `token_env: CNBRAIN_CREDENTIAL_<NAME>` (upper
  case, `.` and `-` as `_`), which the previous release reads.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

import json
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MIGRATED = "migrated"
_SITES = sa.table("sites", sa.column("id", sa.String), sa.column("execution", sa.JSON))


def upgrade() -> None:
    _rewrite(_to_credential)


def downgrade() -> None:
    _rewrite(_to_token_env)


def _to_credential(execution: dict[str, Any]) -> dict[str, Any] | None:
    if "token_file" not in execution and "token_env" not in execution:
        return None
    kept = {k: v for k, v in execution.items() if k not in ("token_file", "token_env")}
    return {**kept, "credential": MIGRATED}


def _to_token_env(execution: dict[str, Any]) -> dict[str, Any] | None:
    name = execution.get("credential")
    if not isinstance(name, str):
        return None
    kept = {k: v for k, v in execution.items() if k != "credential"}
    variable = "CNBRAIN_CREDENTIAL_" + name.upper().replace(".", "_").replace("-", "_")
    return {**kept, "token_env": variable}


def _rewrite(change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> None:
    """Apply `change` to every stored execution; None from it leaves the row alone."""
    bind = op.get_bind()
    rows = bind.execute(sa.select(_SITES.c.id, _SITES.c.execution)).all()
    for site_id, execution in rows:
        if isinstance(execution, str):
            execution = json.loads(execution)
        if not isinstance(execution, dict):
            continue
        changed = change(execution)
        if changed is not None:
            bind.execute(sa.update(_SITES).where(_SITES.c.id == site_id).values(execution=changed))
