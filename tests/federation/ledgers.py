"""Reading the brains' ledgers straight from their PostgreSQL databases."""

from collections.abc import Iterable
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from cnbrain.storage import ledger_store
from cnbrain.storage.database import create_engine, session_factory
from tests.databases import libpq_url
from tests.polling import until


async def rows(url: str, query: str, *args: Any) -> list[dict[str, Any]]:
    connection = await asyncpg.connect(libpq_url(url))
    try:
        return [dict(r) for r in await connection.fetch(query, *args)]
    finally:
        await connection.close()


async def part(url: str, reservation_id: str) -> dict[str, Any] | None:
    found = await rows(url, "SELECT * FROM peer_reservations WHERE id = $1", reservation_id)
    if not found:
        return None
    links = await rows(
        url,
        "SELECT link_id FROM peer_reservation_links WHERE reservation_id = $1 ORDER BY link_id",
        reservation_id,
    )
    return {**found[0], "links": [r["link_id"] for r in links]}


async def used_mbps(url: str, link_ids: list[str]) -> dict[str, int]:
    found = await rows(
        url,
        "SELECT link_id, mbps_used FROM link_capacity WHERE link_id = ANY($1::text[])",
        link_ids,
    )
    return {r["link_id"]: r["mbps_used"] for r in found}


async def site_used(url: str, site_id: str) -> dict[str, int]:
    found = await rows(url, "SELECT * FROM site_capacity WHERE site_id = $1", site_id)
    accelerators = await rows(
        url, "SELECT model, used FROM site_accelerators WHERE site_id = $1", site_id
    )
    return {
        "cpu_m": found[0]["cpu_m_used"],
        "mem_mib": found[0]["mem_mib_used"],
        **{r["model"]: r["used"] for r in accelerators},
    }


async def unreleased(url: str) -> list[dict[str, Any]]:
    return await rows(url, "SELECT id, state FROM peer_reservations WHERE state <> 'released'")


async def all_released_and_sound(urls: Iterable[str], timeout_s: float = 30) -> None:
    """Wait until no database of `urls` holds a part not released (fail the test after
    `timeout_s`), then check every ledger's invariants."""
    wanted = list(urls)

    async def all_released() -> bool | None:
        for url in wanted:
            if await unreleased(url):
                return None
        return True

    await until(all_released, "every part released", timeout_s)
    for url in wanted:
        await check_invariants(url)


async def check_invariants(url: str) -> None:
    """Every used amount in the brain's ledger equals what its reservations and parts hold."""
    engine = create_engine(url)
    try:
        async with session_factory(engine)() as session:
            await ledger_store.check_invariants(session)
    finally:
        await engine.dispose()


LEDGER_TABLES = (
    "site_capacity",
    "site_accelerators",
    "link_capacity",
    "reservations",
    "reservation_links",
    "peer_reservations",
    "peer_reservation_links",
    "placement_requests",
    "decisions",
)
"""The tables a placement or a request changes in a brain's database."""


async def ledger(url: str) -> dict[str, list[str]]:
    """Every row of the brain's `LEDGER_TABLES`, each table's rows in one order, to compare."""
    return {
        table: sorted(repr(sorted(r.items())) for r in await rows(url, f"SELECT * FROM {table}"))
        for table in LEDGER_TABLES
    }
