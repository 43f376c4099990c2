"""A job placed across regions, end to end on separate processes and PostgreSQL: the east brain
(where the tenant submits) runs the job on the western hub's scheduler, and when it completes
the reservation's parts are released in every owner (east, national, west).

The built-in map, with every site on a fast simulator (an hour per second).
"""

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from cnbrain.domain.backend_ref import BackendRef
from cnbrain.netmap.china import china_document
from cnbrain.netmap.files import write_map_document
from cnbrain.storage import ledger_store
from cnbrain.storage.database import create_engine, session_factory
from cnbrain.storage.models import PeerReservation
from tests.federation_processes import LocalFederation, local_federation

REGIONS = ["east", "west"]
GPU_JOB = {
    "source_province": "ZJ",
    "resources": {"cpu": 8, "memory_gib": 64, "accelerator": {"model": "H800", "count": 8}},
    "constraints": {"max_latency_ms": 40, "min_bandwidth_gbps": 10, "interconnect": "ib"},
    "duration_hours": 2,
    "workload_class": "training",
    "national_optimum": True,
    "job": {"command": "python train.py", "max_attempts": 1},
}


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    workdir = tmp_path_factory.mktemp("execution-federation")
    document = china_document()
    fast = {"kind": "simulator", "time_scale": 3600}
    sites = tuple(
        s.model_copy(update={"execution": BackendRef.model_validate(fast)}) for s in document.sites
    )
    map_file = workdir / "china-simulated.json"
    write_map_document(document.model_copy(update={"sites": sites}), map_file)

    yield from local_federation(
        workdir,
        regions=REGIONS,
        database_prefix="cnbrain_exfed",
        shared_env={"CNBRAIN_MAP": str(map_file), "CNBRAIN_EXECUTION_POLL_S": "0.2"},
    )


def _call(federation: LocalFederation, method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    url = federation.members["east"].url
    return httpx.request(method, f"{url}{path}", headers=headers, timeout=30, **kwargs)


async def _held_parts(url: str) -> int:
    engine = create_engine(url)
    try:
        async with session_factory(engine)() as session:
            await ledger_store.check_invariants(session)
            rows = await session.execute(
                select(func.count())
                .select_from(PeerReservation)
                .where(PeerReservation.state != "released")
            )
            return int(rows.scalar_one())
    finally:
        await engine.dispose()


@pytest.mark.slow
def test_a_job_placed_across_regions_runs_and_releases_every_part(
    federation: LocalFederation,
) -> None:
    databases = federation.databases
    _call(federation, "POST", "/v1/tenants", json={"id": "acme", "name": "Acme"})
    made = _call(federation, "POST", "/v1/requests", json={**GPU_JOB, "tenant": "acme"})
    assert made.status_code == 201, made.text
    view = made.json()
    assert view["state"] == "placed", view
    owners = [s["owner"] for s in view["decision"]["path"]["segments"]]
    assert owners == ["east", "national", "west"]
    assert all(asyncio.run(_held_parts(databases[o])) == 1 for o in ("east", "national", "west"))

    seen = ["placed"]
    deadline = time.monotonic() + 60
    while seen[-1] not in ("completed", "failed") and time.monotonic() < deadline:
        state = _call(federation, "GET", f"/v1/requests/{view['id']}").json()["state"]
        if state != seen[-1]:
            seen.append(state)
        time.sleep(0.1)
    assert seen[-1] == "completed" and "running" in seen, seen

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        held = {o: asyncio.run(_held_parts(databases[o])) for o in ("east", "national", "west")}
        if not any(held.values()):
            break
        time.sleep(0.2)
    assert held == {"east": 0, "national": 0, "west": 0}

    attempts = _call(federation, "GET", f"/v1/requests/{view['id']}/attempts").json()
    [attempt] = attempts["attempts"]
    assert attempt["site"] == view["site"] and attempt["state"] == "completed"
    usage = _call(federation, "GET", "/v1/usage").json()
    deadline = time.monotonic() + 10
    while not usage["items"] and time.monotonic() < deadline:
        time.sleep(0.2)
        usage = _call(federation, "GET", "/v1/usage").json()
    [record] = usage["items"]
    assert record["site"] == view["site"] and record["gpus"] == 8 and record["simulated"]
