"""End to end on separate processes and PostgreSQL: cross-region submissions that arrive
together are answered with what the source brain recorded, every one of them."""

import asyncio
from typing import Any

import httpx
import pytest

from tests.federation.ledgers import check_invariants, rows, unreleased
from tests.federation_processes import LocalFederation

CONCURRENT = 8
SMALL_GPU_JOB = {
    "source_province": "ZJ",
    "resources": {"cpu": 4, "memory_gib": 32, "accelerator": {"model": "H800", "count": 1}},
    "constraints": {"min_bandwidth_gbps": 0.1},
    "duration_hours": 1,
    "workload_class": "inference",
    "national_optimum": True,
}


@pytest.mark.asyncio
@pytest.mark.slow
async def test_concurrent_cross_region_answers_are_what_the_source_brain_recorded(
    federation: LocalFederation,
) -> None:
    databases = federation.databases
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    async with httpx.AsyncClient(
        base_url=federation.members["east"].url, headers=headers, timeout=60
    ) as east:
        await east.post("/v1/tenants", json={"id": "acme", "name": "Acme"})
        answers = await asyncio.gather(
            *(
                east.post("/v1/requests", json={**SMALL_GPU_JOB, "tenant": "acme"})
                for _ in range(CONCURRENT)
            )
        )
        assert [a.status_code for a in answers] == [201] * CONCURRENT, [a.text for a in answers]
        views: list[dict[str, Any]] = [a.json() for a in answers]
        for view in views:
            assert view["state"] == "placed", view
            kinds = [s["kind"] for s in view["decision"]["path"]["segments"]]
            assert kinds == ["source", "backbone", "destination"]
            stored = (await east.get(f"/v1/requests/{view['id']}")).json()
            assert stored == view

        ids = [v["id"] for v in views]
        audited = await rows(
            databases["east"],
            "SELECT object_id FROM audit_log WHERE action = 'request.placed'"
            " AND object_id = ANY($1::text[])",
            ids,
        )
        assert sorted(r["object_id"] for r in audited) == sorted(ids)

        for view in views:
            cancelled = await east.post(f"/v1/requests/{view['id']}/cancel")
            assert cancelled.json()["state"] == "cancelled"
    for url in databases.values():
        assert await unreleased(url) == []
        await check_invariants(url)
