"""`cnbrain db upgrade`: run the schema migrations on a brain's database (see
`cnbrain.storage.database.upgrade_schema`).

Safe to run while brains on the same database start (the migration takes an advisory lock on
PostgreSQL). Prints one line. Returns 0; without a database URL, or with an unsupported one,
prints `cnbrain: <problem>` and returns 2.
"""

import argparse
import asyncio
import os
import sys

from sqlalchemy.engine import make_url

DATABASE_URL_ENV = "CNBRAIN_DATABASE_URL"


def add_db_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register `db upgrade` under `sub`."""
    db = sub.add_parser("db", help="manage a brain's database").add_subparsers(
        required=True, metavar="ACTION"
    )
    upgrade = db.add_parser("upgrade", help="run the migrations up to the latest revision")
    upgrade.add_argument("--database-url", help=f"default: ${DATABASE_URL_ENV}")
    upgrade.add_argument("--revision", default="head", help="target (default: %(default)s)")
    upgrade.set_defaults(run=db_upgrade)


def db_upgrade(args: argparse.Namespace) -> int:
    from cnbrain.storage.database import async_url, upgrade_schema

    url = args.database_url or os.environ.get(DATABASE_URL_ENV)
    if not url:
        print(f"cnbrain: give --database-url or set ${DATABASE_URL_ENV}", file=sys.stderr)
        return 2
    try:
        async_url(url)
    except ValueError as exc:
        print(f"cnbrain: {exc}", file=sys.stderr)
        return 2
    asyncio.run(upgrade_schema(url, revision=args.revision))
    shown = make_url(url).render_as_string(hide_password=True)
    print(f"database {shown} upgraded to {args.revision}")
    return 0
