"""End to end on separate processes and PostgreSQL: a site registered on the west's brain
reaches the national brain's map on the west's summary stream, and becomes the candidate of a
cross-region request from the east; retired there, it leaves the national map again."""

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.federation.ledgers import check_invariants, rows, unreleased
from tests.federation.member_requests import GPU_REQUEST, cancel, get, submit
from tests.federation_processes import LocalFederation, local_federation
from tests.polling import until

TWIN_OF = "NX-hub-zhongwei"
FRESH = "NX-hub-fresh"


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from local_federation(
        tmp_path_factory.mktemp("mapsync"),
        regions=["east", "west"],
        database_prefix="cnbrain_fedmap",
        shared_env={"CNBRAIN_ADMISSION_INTERVAL_S": "0.5"},
    )


def _admin(federation: LocalFederation) -> dict[str, str]:
    return {"Authorization": f"Bearer {federation.admin_token}"}


def _rename(value: str) -> str:
    return FRESH if value == TWIN_OF else value


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_site_registered_on_a_region_becomes_a_cross_region_candidate(
    federation: LocalFederation,
) -> None:
    west = federation.members["west"].url
    site = next(s for s in get(federation, "west", "/v1/sites") if s["id"] == TWIN_OF)
    links = [
        {**link, "a": _rename(link["a"]), "b": _rename(link["b"])}
        for link in get(federation, "west", "/v1/links")
        if TWIN_OF in (link["a"], link["b"])
    ]
    body = {
        **GPU_REQUEST,
        "constraints": {**GPU_REQUEST["constraints"], "labels": {"pool": "fresh"}},
        "start": "queue",
        "max_wait_s": 600,
    }
    waiting = submit(federation, "east", body)
    assert waiting["state"] == "queued", waiting

    registered_at = time.monotonic()
    answer = httpx.post(
        f"{west}/v1/sites",
        json={"site": {**site, "id": FRESH, "labels": {"pool": "fresh"}}, "links": links},
        headers=_admin(federation),
        timeout=30,
    )
    assert answer.status_code == 201, answer.text

    async def placed() -> dict[str, Any] | None:
        view: dict[str, Any] = get(federation, "east", f"/v1/requests/{waiting['id']}")
        return view if view["state"] == "placed" else None

    view = await until(placed, "the request placed on the site registered on the west", 30)
    print(f"registered to placed across regions: {time.monotonic() - registered_at:.2f} s")
    assert view["site"] == FRESH
    owners = [(s["kind"], s["owner"]) for s in view["decision"]["path"]["segments"]]
    assert owners == [("source", "east"), ("backbone", "national"), ("destination", "west")]
    assert cancel(federation, "east", waiting["id"])["state"] == "cancelled"

    national = federation.databases["national"]
    assert await _status(national, FRESH) == "active"
    retired = httpx.delete(f"{west}/v1/sites/{FRESH}", headers=_admin(federation), timeout=30)
    assert retired.status_code == 204, retired.text

    async def gone() -> bool | None:
        return True if await _status(national, FRESH) == "retired" else None

    await until(gone, "the site retired in the national brain's map", 30)
    for url in federation.databases.values():
        assert await unreleased(url) == []
        await check_invariants(url)


async def _status(url: str, site_id: str) -> str | None:
    found = await rows(url, "SELECT status FROM sites WHERE id = $1", site_id)
    return str(found[0]["status"]) if found else None


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_weight_matrix_set_on_one_region_holds_for_the_whole_federation(
    federation: LocalFederation,
) -> None:
    matrix = get(federation, "east", "/v1/weight-matrix")
    green = {"cost": 0.5, "latency": 0.25, "energy": 3.0, "balance": 1.0}
    changed = {**matrix, "rows": {**matrix["rows"], "training": green}}
    east = federation.members["east"].url
    answer = httpx.put(
        f"{east}/v1/weight-matrix", json=changed, headers=_admin(federation), timeout=30
    )
    assert answer.status_code == 200, answer.text

    national = federation.databases["national"]
    [row] = await rows(
        national,
        "SELECT cost, latency, energy, balance FROM weight_matrix WHERE workload_class = $1",
        "training",
    )
    assert row == green

    async def followed() -> bool | None:
        west: dict[str, Any] = get(federation, "west", "/v1/weight-matrix")
        return True if west["rows"]["training"] == green else None

    await until(followed, "the west following the matrix set on the east", 30)
    assert get(federation, "east", "/v1/weight-matrix")["rows"]["training"] == green
