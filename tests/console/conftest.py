"""A regional brain process on PostgreSQL and Redis with the built-in map `china`, seeded
through its REST API, and a headless Chromium to load its console.

What the seed places (`Seeded`): tenant acme-ai's GPU training job from Zhejiang goes to a
national hub over three segments; its V100 job takes every V100 of ZJ-idle-1 (the only site a
Zhejiang request for V100 may use: V100 are only on idle-compute sites, which serve their own
province) in class `high`, which may not be preempted, so its two more V100 jobs that ask to
wait are queued, one in class `high` and one in the default class. Tenant other-co has an
inference job and a batch job of its own, and a job of seconds that has run (on its site's
simulator) and been metered.
"""

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver

from tests.console.browser import chromium
from tests.databases import create_postgres_database, drop_postgres_database, require_redis
from tests.processes import brain_processes
from tests.regional.brain_api import ADMIN_TOKEN

EXAMPLES = Path(__file__).parents[2] / "examples" / "requests"
V100_JOB: dict[str, Any] = {
    "source_province": "ZJ",
    "resources": {
        "nodes": 4,
        "cpu": 64,
        "memory_gib": 256,
        "accelerator": {"model": "V100", "count": 8},
    },
    "duration_hours": 0.5,
}
"""A job that takes all 32 V100 of ZJ-idle-1."""
SHORT_JOB: dict[str, Any] = {
    "tenant": "other-co",
    "source_province": "GD",
    "resources": {"cpu": 16, "memory_gib": 64},
    "duration_hours": 0.001,
    "job": {"name": "etl"},
}
"""A job of 3.6 s, run by the site's simulator and then metered."""


@dataclass(frozen=True)
class Seeded:
    """The brain at `url` and what the seed made there (module docstring)."""

    url: str
    tenant_key: str
    """A tenant-user key of acme-ai."""
    training: dict[str, Any]
    """acme-ai's GPU training job, placed: its view as the API gave it."""
    v100: dict[str, Any]
    queued_high: dict[str, Any]
    queued_normal: dict[str, Any]
    other: dict[str, Any]
    """other-co's inference job."""


def admin_client(url: str) -> httpx.Client:
    return httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30
    )


@pytest.fixture(scope="module")
def brain_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    database = asyncio.run(create_postgres_database("cnbrain_console"))
    redis = asyncio.run(require_redis())
    try:
        with brain_processes(
            1,
            database_url=database,
            redis_url=redis,
            map_spec="china",
            admin_token=ADMIN_TOKEN,
            workdir=tmp_path_factory.mktemp("console"),
            extra_env={"CNBRAIN_ADMISSION_INTERVAL_S": "0.5"},
        ) as urls:
            yield urls[0]
    finally:
        asyncio.run(drop_postgres_database(database))


@pytest.fixture(scope="module")
def seeded(brain_url: str) -> Seeded:
    with admin_client(brain_url) as admin:
        for tenant, name in (("acme-ai", "ACME AI"), ("other-co", "Other Co")):
            made = admin.post("/v1/tenants", json={"id": tenant, "name": name})
            assert made.status_code == 201, made.text
        user = admin.post(
            "/v1/users", json={"name": "ana", "role": "tenant-user", "tenant": "acme-ai"}
        )
        assert user.status_code == 201, user.text
        key = admin.post(f"/v1/users/{user.json()['id']}/api-keys")
        assert key.status_code == 201, key.text

        def submit(body: dict[str, Any], state: str) -> dict[str, Any]:
            answer = admin.post("/v1/requests", json=body)
            assert answer.status_code == 201, answer.text
            view: dict[str, Any] = answer.json()
            assert view["state"] == state, view
            return view

        training = submit(_example("gpu-training.json", tenant="acme-ai"), "placed")
        # In class high, which may not be preempted: the queued jobs wait for its end.
        v100 = submit({**V100_JOB, "tenant": "acme-ai", "priority_class": "high"}, "placed")
        waiting = {**V100_JOB, "tenant": "acme-ai", "start": "queue"}
        high = submit({**waiting, "priority_class": "high"}, "queued")
        normal = submit(waiting, "queued")
        other = submit(_example("inference-local.json", tenant="other-co"), "placed")
        submit(_example("batch-cpu-green.json", tenant="other-co"), "placed")
        metered = submit(SHORT_JOB, "placed")
        _until_planned(admin, {high["id"], normal["id"]})
        _until_completed(admin, metered["id"])
    return Seeded(
        url=brain_url,
        tenant_key=key.json()["token"],
        training=training,
        v100=v100,
        queued_high=high,
        queued_normal=normal,
        other=other,
    )


@pytest.fixture(scope="module")
def driver() -> Iterator[webdriver.Chrome]:
    with chromium() as browser:
        yield browser


def _example(name: str, *, tenant: str) -> dict[str, Any]:
    """Example request `name` for `tenant`, under an id the brain gives."""
    body: dict[str, Any] = json.loads((EXAMPLES / name).read_text(encoding="utf-8"))
    body.pop("id")
    return {**body, "tenant": tenant}


def _until_planned(admin: httpx.Client, request_ids: set[str], *, tries: int = 300) -> None:
    """Wait until the admission round has planned every one of `request_ids` (asked every
    0.1 s); the test fails when `tries` askings have not shown them all."""
    for _ in range(tries):
        planned = {item["id"] for item in admin.get("/v1/queue").json()["items"]}
        if request_ids <= planned:
            return
        time.sleep(0.1)
    pytest.fail(f"the admission queue never planned {sorted(request_ids)}")


def _until_completed(admin: httpx.Client, request_id: str, *, tries: int = 600) -> None:
    """Wait until request `request_id` has completed (asked every 0.1 s); the test fails
    when `tries` askings have not shown it."""
    for _ in range(tries):
        state = admin.get(f"/v1/requests/{request_id}").json()["state"]
        if state == "completed":
            return
        time.sleep(0.1)
    pytest.fail(f"request {request_id} has not completed: {state}")
