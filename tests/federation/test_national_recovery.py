"""End to end on separate processes and PostgreSQL: the national brain's state survives a
kill -9. Killed while cross-region placements are prepared and not yet committed, the
national brain starts again knowing the regions from its database (on a port the regions do
not know, so none registers again meanwhile), releases in every owner the parts of the
placements whose outcome it never decided, and leaves the requests it had answered placed."""

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.federation.ledgers import all_released_and_sound, rows, unreleased
from tests.federation.member_requests import GPU_REQUEST, cancel, get, submit
from tests.federation_processes import LocalFederation, local_federation
from tests.polling import until
from tests.processes import free_port

COMMIT_DELAY_MS = 3_000
TTL_MS = 600_000
"""Prepared parts expire only after ten minutes: only the national brain's recovery can
release them within the test."""


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from local_federation(
        tmp_path_factory.mktemp("recovery"),
        regions=["east", "west"],
        database_prefix="cnbrain_fedrec",
        national_env={"CNBRAIN_PREPARE_TTL_MS": str(TTL_MS)},
        commit_delay_ms=COMMIT_DELAY_MS,
    )


async def _prepared(url: str) -> set[str]:
    found = await rows(url, "SELECT id FROM peer_reservations WHERE state = 'prepared'")
    return {r["id"] for r in found}


def _restart_national(federation: LocalFederation, port: int) -> None:
    national = federation.members["national"]
    national.env["CNBRAIN_GRPC_PORT"] = str(port)
    national.grpc_port = port
    federation.start_member("national")


def _registered(federation: LocalFederation, region: str) -> bool:
    answer = httpx.get(f"{federation.members[region].url}/readyz", timeout=5)
    return bool(answer.json().get("national_registered"))


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_national_brain_killed_mid_placement_releases_what_it_never_decided(
    federation: LocalFederation,
) -> None:
    databases = federation.databases
    national_db = databases["national"]
    answered = await asyncio.gather(
        *(asyncio.to_thread(submit, federation, "east", GPU_REQUEST) for _ in range(2))
    )
    assert [view["state"] for view in answered] == ["placed", "placed"], answered
    kept = {view["decision"]["reservation_id"] for view in answered}

    burst = [
        asyncio.create_task(asyncio.to_thread(submit, federation, "east", GPU_REQUEST))
        for _ in range(3)
    ]

    async def under_way() -> set[str] | None:
        recorded = {
            r["reservation_id"]
            for r in await rows(national_db, "SELECT * FROM inflight_placements")
        }
        prepared = await _prepared(databases["west"]) & await _prepared(databases["east"])
        return recorded if recorded and recorded <= prepared else None

    in_flight = await until(
        under_way, "placements recorded and prepared in the east and the west", 30, every_s=0.05
    )
    federation.kill("national")
    late = await asyncio.gather(*burst)
    assert await _prepared(databases["west"]) >= in_flight
    assert await _prepared(databases["east"]) >= in_flight
    left = await rows(national_db, "SELECT reservation_id, owners FROM inflight_placements")
    assert {r["reservation_id"] for r in left} == in_flight
    assert all(set(json.loads(r["owners"])) >= {"east", "west"} for r in left), left

    old_port = federation.national_port
    _restart_national(federation, free_port())
    try:
        assert not await rows(national_db, "SELECT * FROM inflight_placements")
        for owner in ("east", "west", "national"):
            assert await _prepared(databases[owner]) == set(), owner
        assert not await rows(national_db, "SELECT * FROM release_backlog")
        assert not _registered(federation, "east") and not _registered(federation, "west")

        for view in answered:
            assert get(federation, "east", f"/v1/requests/{view['id']}")["state"] == "placed"
        for owner in ("east", "west", "national"):
            held = {r["id"] for r in await unreleased(databases[owner]) if r["state"] == "held"}
            assert kept <= held, owner
            assert not held & in_flight, owner
        for view in late:
            state = get(federation, "east", f"/v1/requests/{view['id']}")["state"]
            assert state == view["state"]
            assert state in ("placed", "rejected"), view
            if state == "rejected":
                assert view["decision"].get("reservation_id") not in kept
    finally:
        federation.kill("national")
        _restart_national(federation, old_port)
        federation.wait_registered()

    for view in [*answered, *late]:
        if view["state"] == "placed":
            assert cancel(federation, "east", view["id"])["state"] == "cancelled"

    await all_released_and_sound(databases.values())
