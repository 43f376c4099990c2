"""End to end on separate processes and PostgreSQL: a quote that no site of its region fits
is made by the national brain, gives what a submission right after gets, and reserves
nothing in any brain; without the national brain it says so."""

from typing import Any

import httpx
import pytest

from cnbrain.regional.use_cases.quote import BY_NATIONAL, NATIONAL_UNREACHABLE
from tests.federation.ledgers import ledger
from tests.federation.member_requests import GPU_REQUEST, cancel, submit
from tests.federation_processes import LocalFederation

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

LOCAL_REQUEST = {
    "source_province": "ZJ",
    "resources": {"cpu": 4.0, "memory_gib": 8.0},
    "duration_hours": 1.0,
    "workload_class": "batch",
}


def quote(federation: LocalFederation, region: str, body: dict[str, Any]) -> dict[str, Any]:
    """`body` (its `id` dropped) quoted at `region` for tenant acme (made if missing)."""
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    url = federation.members[region].url
    httpx.post(f"{url}/v1/tenants", json={"id": "acme", "name": "Acme"}, headers=headers)
    body = {k: v for k, v in body.items() if k != "id"}
    answer = httpx.post(
        f"{url}/v1/quotes", json={**body, "tenant": "acme"}, headers=headers, timeout=30
    )
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def _segments(decision: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["kind"], s["owner"]) for s in decision["path"]["segments"]]


async def _ledgers(federation: LocalFederation) -> dict[str, dict[str, list[str]]]:
    return {name: await ledger(url) for name, url in federation.databases.items()}


async def test_a_gpu_job_quoted_in_the_east_gets_what_its_submission_gets(
    federation: LocalFederation,
) -> None:
    quote(federation, "east", LOCAL_REQUEST)  # makes the tenant before the ledgers are read
    before = await _ledgers(federation)

    quoted = quote(federation, "east", GPU_REQUEST)

    assert await _ledgers(federation) == before
    decision = quoted["decision"]
    assert decision["status"] == "placed", decision
    assert decision["reservation_id"] is None
    assert quoted["notes"] == [BY_NATIONAL]
    assert decision["site_kind"] == "hub"
    assert _segments(decision) == [
        ("source", "east"),
        ("backbone", "national"),
        ("destination", "west"),
    ]
    assert decision["outcome"]["cost_cny"] > 0
    assert all(alt["site"] != decision["site"] for alt in quoted["alternatives"])

    placed = submit(federation, "east", GPU_REQUEST)

    assert placed["state"] == "placed", placed
    assert placed["decision"]["site"] == decision["site"]
    assert _segments(placed["decision"]) == _segments(decision)
    assert [s["hops"] for s in placed["decision"]["path"]["segments"]] == [
        s["hops"] for s in decision["path"]["segments"]
    ]
    assert placed["decision"]["outcome"]["cost_cny"] == decision["outcome"]["cost_cny"]
    assert await _ledgers(federation) != before  # what a quote would have changed
    cancel(federation, "east", placed["id"])


async def test_a_quote_that_fits_in_its_province_is_the_regions_own(
    federation: LocalFederation,
) -> None:
    before = await _ledgers(federation)

    quoted = quote(federation, "east", LOCAL_REQUEST)

    assert await _ledgers(federation) == before
    assert quoted["notes"] == []
    assert quoted["decision"]["province"] == "ZJ"
    assert _segments(quoted["decision"]) == [("local", "east")]


async def test_without_the_national_brain_a_quote_says_so(federation: LocalFederation) -> None:
    before = await _ledgers(federation)
    federation.kill("national")
    try:
        quoted = quote(federation, "east", GPU_REQUEST)
    finally:
        federation.start_member("national")
        federation.wait_registered()

    assert quoted["notes"] == [NATIONAL_UNREACHABLE]
    assert quoted["decision"]["status"] == "rejected"
    assert "national brain is unavailable" in quoted["decision"]["reason"]
    assert await _ledgers(federation) == before
