"""Cross-region requests placed together in one batch of the national brain, end to end on
separate processes and PostgreSQL: requests competing for the last accelerators of the only
hub that has them, and one owner refusing one part of a batch; and a request whose source and
destination segments are owned by one region, which holds one part with both.

The national brain waits COMMIT_DELAY_MS between prepare and commit, so requests submitted
while a first one is being committed wait and go together as the next batch."""

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.federation.ledgers import check_invariants, part, rows, site_used, unreleased
from tests.federation.member_requests import cancel
from tests.federation_processes import LocalFederation, local_federation

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

COMMIT_DELAY_MS = 2_000
SOURCE = "SC"
"""A province of `west`, whose region has no H100 and no site that may serve others' jobs."""


@pytest.fixture(scope="module")
def batched(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from local_federation(
        tmp_path_factory.mktemp("batches"),
        database_prefix="cnbrain_fed_batches",
        commit_delay_ms=COMMIT_DELAY_MS,
    )


def _admin(federation: LocalFederation, region: str) -> httpx.Client:
    return httpx.Client(
        base_url=federation.members[region].url,
        headers={"Authorization": f"Bearer {federation.admin_token}"},
        timeout=60,
    )


def _job(tenant: str, model: str, count: int) -> dict[str, Any]:
    """`count` accelerators: one node, or nodes of 8 when more than 8."""
    nodes = count // 8 if count > 8 else 1
    return {
        "tenant": tenant,
        "source_province": SOURCE,
        "resources": {
            "nodes": nodes,
            "cpu": 4.0,
            "memory_gib": 16.0,
            "accelerator": {"model": model, "count": count // nodes},
        },
        "constraints": {"min_bandwidth_gbps": 0.1},
        "duration_hours": 1.0,
        "workload_class": "inference",
        "national_optimum": True,
    }


def _submit(federation: LocalFederation, body: dict[str, Any]) -> dict[str, Any]:
    with _admin(federation, "west") as west:
        answer = west.post("/v1/requests", json=body)
    assert answer.status_code == 201, answer.text
    view: dict[str, Any] = answer.json()
    return view


async def _together(
    federation: LocalFederation, bodies: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Submit a first request, wait until the national brain has prepared it (its batch is
    now in the commit delay), then submit `bodies` at once: they wait for that batch and go
    together as the next one. The first answer and the answers to `bodies`, in order."""
    national = federation.databases["national"]
    with ThreadPoolExecutor(max_workers=len(bodies) + 1) as pool:
        first = pool.submit(_submit, federation, _job("acme", "A100", 1))
        deadline = time.monotonic() + 30
        while not await rows(national, "SELECT id FROM peer_reservations WHERE state = 'prepared'"):
            assert not first.done(), f"answered before anything was prepared: {first.result()}"
            assert time.monotonic() < deadline, "the national brain prepared nothing"
            await asyncio.sleep(0.02)
        rest = [pool.submit(_submit, federation, body) for body in bodies]
        return first.result(), [future.result() for future in rest]


def _batch_of(view: dict[str, Any]) -> str:
    notes: list[str] = view["decision"]["explanation"]["notes"]
    return next(n for n in notes if n.startswith("placed in a batch of"))


async def _settled(federation: LocalFederation, placed: list[dict[str, Any]]) -> None:
    """Every brain's ledger adds up, nothing is left prepared, and the held parts are those
    of the placed requests."""
    databases: dict[str, str] = federation.databases
    reservations = {view["decision"]["reservation_id"] for view in placed}
    for owner, url in databases.items():
        await check_invariants(url)
        left = await unreleased(url)
        assert all(part["state"] == "held" for part in left), (owner, left)
        assert {part["id"] for part in left} <= reservations, owner
    assert {part["id"] for part in await unreleased(databases["national"])} == reservations


async def test_two_requests_of_one_batch_competing_for_the_last_accelerators_one_is_placed(
    batched: LocalFederation,
) -> None:
    federation = batched
    with _admin(federation, "east") as east, _admin(federation, "north") as north:
        # Only two hubs have H100: none is left in Shanghai, ten in Zhangjiakou.
        usage = {"cpu_cores": 0, "memory_gib": 0}
        assert (
            east.post(
                "/v1/sites/SH-hub-qingpu/usage", json={**usage, "accelerators": {"H100": 1024}}
            ).status_code
            == 204
        )
        assert (
            north.post(
                "/v1/sites/HE-hub-zhangjiakou/usage",
                json={**usage, "accelerators": {"H100": 246}},
            ).status_code
            == 204
        )
    with _admin(federation, "west") as west:
        west.post("/v1/tenants", json={"id": "acme", "name": "Acme"})
    await asyncio.sleep(1.5)  # the regions' summaries show it

    first, answers = await _together(federation, [_job("acme", "H100", 8)] * 2)

    assert first["state"] == "placed"
    states = sorted(view["state"] for view in answers)
    assert states == ["placed", "rejected"], answers
    winner = next(view for view in answers if view["state"] == "placed")
    loser = next(view for view in answers if view["state"] == "rejected")
    assert winner["decision"]["site"] == "HE-hub-zhangjiakou"
    assert _batch_of(winner) == "placed in a batch of 2 cross-region requests"
    assert loser["reason"]
    north_db = federation.databases["north"]
    assert (await site_used(north_db, "HE-hub-zhangjiakou"))["H100"] == 8000
    await _settled(federation, [first, winner])

    for view in (first, winner):
        assert cancel(federation, "west", view["id"])["state"] == "cancelled"
    await _settled(federation, [])
    assert (await site_used(north_db, "HE-hub-zhangjiakou"))["H100"] == 0


async def test_a_part_one_owner_refuses_fails_only_its_request_and_leaves_nothing_held(
    batched: LocalFederation,
) -> None:
    federation = batched
    with _admin(federation, "west") as west:
        west.post("/v1/tenants", json={"id": "acme", "name": "Acme"})
        west.post("/v1/tenants", json={"id": "frugal", "name": "Frugal"})
        limited = west.put("/v1/tenants/frugal/quota", json={"active_requests": 1})
        assert limited.status_code == 200, limited.text

    first, answers = await _together(
        federation,
        [_job("frugal", "A100", 1), _job("frugal", "A100", 1), _job("acme", "Ascend910B", 2)],
    )

    frugal, other = answers[:2], answers[2]
    assert first["state"] == "placed"
    assert other["state"] == "placed", other
    assert _batch_of(other) == "placed in a batch of 3 cross-region requests"
    assert sorted(view["state"] for view in frugal) == ["placed", "rejected"], frugal
    refused = next(view for view in frugal if view["state"] == "rejected")
    assert "prepare in 'west'" in refused["reason"] and "active" in refused["reason"]
    placed = [first, other, *(view for view in frugal if view["state"] == "placed")]
    await _settled(federation, placed)
    with _admin(federation, "west") as west:
        quota = west.get("/v1/tenants/frugal/quota").json()
    assert quota["used_active_requests"] == 1

    for view in placed:
        assert cancel(federation, "west", view["id"])["state"] == "cancelled"
    await _settled(federation, [])


async def test_a_region_that_owns_the_source_and_the_destination_holds_one_part_with_both(
    batched: LocalFederation,
) -> None:
    federation = batched
    databases: dict[str, str] = federation.databases
    # More L40S than the regions other than east have free (their summaries leave them out);
    # of east's sites only the Shanghai hub may serve another province.
    with _admin(federation, "east") as east:
        east.post("/v1/tenants", json={"id": "acme", "name": "Acme"})
        answer = east.post(
            "/v1/requests", json={**_job("acme", "L40S", 200), "source_province": "ZJ"}
        )
    assert answer.status_code == 201, answer.text
    view = answer.json()

    assert view["state"] == "placed", view
    segments = view["decision"]["path"]["segments"]
    assert [(s["kind"], s["owner"]) for s in segments] == [
        ("source", "east"),
        ("backbone", "national"),
        ("destination", "east"),
    ]
    reservation = view["decision"]["reservation_id"]
    own = await part(databases["east"], reservation)
    assert own is not None and own["state"] == "held"
    assert own["site_id"] == "SH-hub-qingpu" and own["counts_quota"] is True
    assert own["links"] == sorted(
        h["link"] for s in segments if s["owner"] == "east" for h in s["hops"]
    )
    assert (await site_used(databases["east"], "SH-hub-qingpu"))["L40S"] == 200_000
    backbone = await part(databases["national"], reservation)
    assert backbone is not None
    window = (own["start_at"], own["end_at"])
    assert (backbone["start_at"], backbone["end_at"]) == window  # one window for every part
    assert (window[1] - window[0]).total_seconds() == 3600  # the request's duration
    await _settled(federation, [view])

    assert cancel(federation, "east", view["id"])["state"] == "cancelled"
    await _settled(federation, [])
    assert (await site_used(databases["east"], "SH-hub-qingpu"))["L40S"] == 0
