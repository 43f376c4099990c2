"""End to end on separate processes and PostgreSQL: a release the national brain owes a
region it could not reach survives a kill -9 of the national brain, and is made once the
region is back."""

from collections.abc import Iterator
from typing import Any

import pytest

from tests.federation.ledgers import check_invariants, rows, unreleased
from tests.federation.member_requests import GPU_REQUEST, cancel, submit
from tests.federation_processes import LocalFederation, local_federation
from tests.polling import until


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from local_federation(
        tmp_path_factory.mktemp("backlog"),
        regions=["east", "west"],
        database_prefix="cnbrain_fedrel",
    )


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_release_owed_to_a_region_down_survives_a_restart_of_the_national_brain(
    federation: LocalFederation,
) -> None:
    body = {
        **GPU_REQUEST,
        "constraints": {**GPU_REQUEST["constraints"], "regions_allowed": ["west"]},
    }
    placed = submit(federation, "east", body)
    assert placed["state"] == "placed", placed
    reservation_id = placed["decision"]["reservation_id"]
    national, west = federation.databases["national"], federation.databases["west"]
    assert reservation_id in [r["id"] for r in await unreleased(west)]

    federation.kill("west")
    assert cancel(federation, "east", placed["id"])["state"] == "cancelled"
    owed = await rows(national, "SELECT owner, reservation_id FROM release_backlog")
    assert owed == [{"owner": "west", "reservation_id": reservation_id}]

    federation.kill("national")
    federation.start_member("national")
    federation.start_member("west")
    federation.wait_registered()

    async def released() -> bool | None:
        held = [r["id"] for r in await unreleased(west)]
        return True if reservation_id not in held else None

    await until(released, "the owed release made in the west after the restarts", 60)

    async def paid() -> bool | None:
        return True if not await rows(national, "SELECT * FROM release_backlog") else None

    await until(paid, "the backlog emptied", 30)
    for url in federation.databases.values():
        assert await unreleased(url) == []
        await check_invariants(url)
