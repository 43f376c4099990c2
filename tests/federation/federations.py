"""Local federations on PostgreSQL for the end-to-end tests."""

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

from databases import create_postgres_database, drop_postgres_database, require_redis
from federation_processes import LocalFederation

REGIONS = ["east", "north", "south", "west"]


def make_federation(
    workdir: Path, national_env: dict[str, str] | None = None
) -> Iterator[LocalFederation]:
    async def databases() -> dict[str, str]:
        return {
            name: await create_postgres_database(f"cnbrain_fed_{name}")
            for name in ["national", *REGIONS]
        }

    urls = asyncio.run(databases())
    redis = asyncio.run(require_redis())
    federation = LocalFederation(
        workdir=workdir,
        databases=urls,
        redis_url=redis,
        admin_token=f"ck_{secrets.token_hex(8)}.{secrets.token_urlsafe(32)}",
        regions=REGIONS,
        national_env=national_env,
        shared_env={"CNBRAIN_PEER_TOKEN": secrets.token_urlsafe(24)},
    )
    federation.databases = urls  # type: ignore[attr-defined]
    try:
        federation.start()
        federation.wait_registered()
        yield federation
    finally:
        federation.stop()

        async def drop() -> None:
            for url in urls.values():
                await drop_postgres_database(url)

        asyncio.run(drop())
