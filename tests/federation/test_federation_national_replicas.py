"""End to end on separate processes and PostgreSQL: the national brain as two replicas on one
database. The replica the regions call is killed (kill -9) during a burst of cross-region
submissions while placements are prepared and not yet committed: every submission is
answered (the regions call the other replica), every answer holds, the parts of the
placements the dead replica never decided are released by the other once its lease lapsed,
and the other replica takes on the duties and goes on placing."""

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.federation.ledgers import all_released_and_sound, check_invariants, rows, unreleased
from tests.federation.member_requests import GPU_REQUEST, cancel, get, submit
from tests.federation_processes import LocalFederation, local_federation
from tests.polling import until

LEASE_S = 2.0
COMMIT_DELAY_MS = 1_500
TTL_MS = 600_000
"""Prepared parts expire only after ten minutes: only the live replica's recovery can release
those of the dead one within the test."""
BURST = 8


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from local_federation(
        tmp_path_factory.mktemp("replicas"),
        regions=["east", "west"],
        database_prefix="cnbrain_fedrep",
        national_env={
            "CNBRAIN_REPLICA_LEASE_S": str(LEASE_S),
            "CNBRAIN_PREPARE_TTL_MS": str(TTL_MS),
        },
        commit_delay_ms=COMMIT_DELAY_MS,
        national_replicas=2,
    )


async def _held_and_prepared(url: str) -> tuple[set[str], set[str]]:
    found = await unreleased(url)
    held = {r["id"] for r in found if r["state"] == "held"}
    return held, {r["id"] for r in found if r["state"] == "prepared"}


def _registered_with_both(federation: LocalFederation) -> bool:
    """Whether every region says both replicas have it registered."""
    for region in ("east", "west"):
        ready = httpx.get(f"{federation.members[region].url}/readyz", timeout=5).json()
        if ready.get("national_replicas_registered") != 2:
            return False
    return True


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_killed_national_replica_loses_nothing_and_the_other_carries_on(
    federation: LocalFederation,
) -> None:
    databases = federation.databases
    national_db = databases["national"]
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    made = httpx.post(
        f"{federation.members['east'].url}/v1/tenants",
        json={"id": "acme", "name": "Acme"},
        headers=headers,
        timeout=30,
    )
    assert made.status_code in (201, 409), made.text

    async def registered() -> bool | None:
        return _registered_with_both(federation) or None

    await until(registered, "every region registered with both replicas", 30)
    first = submit(federation, "east", GPU_REQUEST)
    assert first["state"] == "placed", first

    burst = [
        asyncio.create_task(asyncio.to_thread(submit, federation, "east", GPU_REQUEST))
        for _ in range(BURST)
    ]

    async def deciding_on_the_first() -> set[str] | None:
        found = await rows(national_db, "SELECT reservation_id, replica FROM inflight_placements")
        ids = {r["reservation_id"] for r in found if r["replica"] == "national-1"}
        return ids or None

    in_flight = await until(
        deciding_on_the_first, "placements under way on national-1", 30, every_s=0.05
    )
    federation.kill("national")
    killed_at = time.monotonic()
    answered = await asyncio.gather(*burst)

    # Every submission was answered, and each answer holds.
    assert len(answered) == BURST
    for view in [first, *answered]:
        assert view["state"] == "placed", view
        assert get(federation, "east", f"/v1/requests/{view['id']}")["state"] == "placed"
    placed = [first, *answered]
    kept = {view["decision"]["reservation_id"] for view in placed}
    assert not kept & in_flight  # the killed replica's placements were never answered

    # The live replica releases what the dead one left under way once its lease lapsed.
    async def nothing_left() -> bool | None:
        if await rows(national_db, "SELECT * FROM inflight_placements"):
            return None
        for owner in ("east", "west", "national"):
            held, prepared = await _held_and_prepared(databases[owner])
            if prepared or held - kept:
                return None
        return True

    await until(nothing_left, "the dead replica's parts released", 30)
    assert time.monotonic() - killed_at >= LEASE_S * 0.9
    for owner in ("east", "west", "national"):
        held, _ = await _held_and_prepared(databases[owner])
        assert kept <= held, owner
        await check_invariants(databases[owner])

    # The other replica does the duties now, and goes on placing.
    async def duties_on_the_second() -> bool | None:
        found = await rows(national_db, "SELECT owner FROM leases WHERE name = 'national-duties'")
        return True if found and found[0]["owner"] == "national-2" else None

    await until(duties_on_the_second, "the duties on national-2", LEASE_S * 5)
    after = submit(federation, "east", GPU_REQUEST)
    assert after["state"] == "placed", after
    placed.append(after)
    held, _ = await _held_and_prepared(databases["west"])
    assert after["decision"]["reservation_id"] in held

    for view in placed:
        assert cancel(federation, "east", view["id"])["state"] == "cancelled"

    await all_released_and_sound(databases.values())
