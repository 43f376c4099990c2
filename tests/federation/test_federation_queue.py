"""End to end on separate processes and PostgreSQL: a cross-region request that asks to wait
is queued by its source region while the western hubs are full, and is admitted (placed by
the national brain across three brains) once one of them frees.

The west's three hubs with H800 accelerators are made full by reports of use outside the
brains (`POST /v1/sites/{id}/usage`), and one is freed the same way.
"""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.federation.ledgers import check_invariants, unreleased
from tests.federation.member_requests import GPU_REQUEST, cancel, get, submit
from tests.federation_processes import LocalFederation, local_federation
from tests.polling import until

WEST_H800 = {"CQ-hub-chongqing": 256, "GS-hub-qingyang": 512, "NX-hub-zhongwei": 768}
"""The western sites with H800 accelerators, and how many each has."""


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from local_federation(
        tmp_path_factory.mktemp("queue"),
        regions=["east", "west"],
        database_prefix="cnbrain_fedq",
        shared_env={"CNBRAIN_ADMISSION_INTERVAL_S": "0.5"},
    )


def _report_h800(federation: LocalFederation, site: str, used: int) -> None:
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    answer = httpx.post(
        f"{federation.members['west'].url}/v1/sites/{site}/usage",
        json={"cpu_cores": 0, "memory_gib": 0, "accelerators": {"H800": used}},
        headers=headers,
        timeout=30,
    )
    assert answer.status_code == 204, answer.text


def _view(federation: LocalFederation, request_id: str) -> dict[str, Any]:
    view: dict[str, Any] = get(federation, "east", f"/v1/requests/{request_id}")
    return view


def _events(federation: LocalFederation, request_id: str) -> list[str]:
    events = get(federation, "east", f"/v1/requests/{request_id}/events")["events"]
    return [event["kind"] for event in events]


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_cross_region_request_waits_and_is_admitted_when_the_western_hub_frees(
    federation: LocalFederation,
) -> None:
    for site, count in WEST_H800.items():
        _report_h800(federation, site, count)
    body = {
        **GPU_REQUEST,
        "constraints": {**GPU_REQUEST["constraints"], "regions_allowed": ["west"]},
        "start": "queue",
        "max_wait_s": 600,
    }
    view = submit(federation, "east", body)
    assert view["state"] == "queued", view

    async def planned() -> dict[str, Any] | None:
        now = _view(federation, view["id"])
        return now if now["queue"] is not None else None

    async def admitted() -> dict[str, Any] | None:
        now = _view(federation, view["id"])
        return now if now["state"] == "placed" else None

    waiting = await until(planned, "the queued request's place in the queue")
    assert waiting["state"] == "queued"
    assert "national brain" in waiting["queue"]["reason"]

    _report_h800(federation, "NX-hub-zhongwei", 0)
    placed = await until(admitted, "the request admitted once the western hub frees", 60)
    assert placed["site"] == "NX-hub-zhongwei"
    segments = placed["decision"]["path"]["segments"]
    assert [(s["kind"], s["owner"]) for s in segments] == [
        ("source", "east"),
        ("backbone", "national"),
        ("destination", "west"),
    ]
    assert _events(federation, view["id"]) == ["submitted", "queued", "admitted"]
    for url in federation.databases.values():
        await check_invariants(url)

    assert cancel(federation, "east", view["id"])["state"] == "cancelled"
    for url in federation.databases.values():
        assert await unreleased(url) == []
        await check_invariants(url)
