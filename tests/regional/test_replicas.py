"""Two brain processes on one PostgreSQL database: concurrent submissions never oversubscribe
a site or a quota, and nothing stays reserved after cancellation or rejection."""

import asyncio
import copy
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cnbrain.storage import ledger_store
from cnbrain.storage.database import create_engine, session_factory
from tests.processes import brains_on_a_new_database
from tests.regional.brain_api import ADMIN_TOKEN
from tests.tiny_map import tiny_map_raw

ONE_GPU = {
    "source_province": "AA",
    "resources": {"cpu": 1, "memory_gib": 1, "accelerator": {"model": "A100", "count": 1}},
    "duration_hours": 1,
    "national_optimum": True,
}
CAPACITY = 50
"""A100s reachable from AA on the test map: AA-dc 4 + BB-hub 16 + CC-hub 30."""


def fifty_gpu_map(path: Path) -> str:
    raw = copy.deepcopy(tiny_map_raw())
    for site in raw["sites"]:
        if site["id"] == "CC-hub":
            site["capacity"]["accelerators"] = {"A100": 30}
            site["prices"]["accelerator_hour"] = {"A100": 8.0}
    path.write_text(json.dumps(raw), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], str]]:
    workdir = tmp_path_factory.mktemp("replicas")
    with brains_on_a_new_database(
        2,
        prefix="cnbrain_replicas",
        map_spec=fifty_gpu_map(workdir / "map.json"),
        admin_token=ADMIN_TOKEN,
        workdir=workdir,
    ) as (urls, database):
        yield urls, database


def admin(url: str) -> httpx.Client:
    return httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30
    )


def new_tenant(url: str, name: str, quota: dict[str, Any] | None = None) -> str:
    with admin(url) as client:
        assert client.post("/v1/tenants", json={"id": name, "name": name}).status_code == 201
        if quota:
            assert client.put(f"/v1/tenants/{name}/quota", json=quota).status_code == 200
        user = client.post(
            "/v1/users", json={"name": "u", "role": "tenant-user", "tenant": name}
        ).json()
        token: str = client.post(f"/v1/users/{user['id']}/api-keys").json()["token"]
        return token


async def submit_all(urls: list[str], token: str, count: int) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=100)
    async with httpx.AsyncClient(headers=headers, timeout=120, limits=limits) as client:
        answers = await asyncio.gather(
            *(client.post(f"{urls[i % len(urls)]}/v1/requests", json=ONE_GPU) for i in range(count))
        )
    assert all(a.status_code == 201 for a in answers), [
        a.text for a in answers if a.status_code != 201
    ][:3]
    return [a.json() for a in answers]


async def check_database(database: str) -> None:
    engine = create_engine(database)
    try:
        async with session_factory(engine)() as session:
            await ledger_store.check_invariants(session)
    finally:
        await engine.dispose()


def test_200_concurrent_submissions_take_capacity_for_50_at_most(
    replicas: tuple[list[str], str],
) -> None:
    urls, database = replicas
    token = new_tenant(urls[0], "crowd")
    views = asyncio.run(submit_all(urls, token, 200))
    placed = [v for v in views if v["state"] == "placed"]
    assert len(placed) == CAPACITY
    assert all(v["state"] == "rejected" and v["reason"] for v in views if v["state"] != "placed")
    per_site: dict[str, int] = {}
    for view in placed:
        per_site[view["site"]] = per_site.get(view["site"], 0) + 1
    assert per_site == {"AA-dc": 4, "BB-hub": 16, "CC-hub": 30}
    asyncio.run(check_database(database))
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        for i, view in enumerate(placed):
            answer = client.post(f"{urls[i % 2]}/v1/requests/{view['id']}/cancel")
            assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
    asyncio.run(check_database(database))
    again = asyncio.run(submit_all(urls, token, 60))
    assert sum(v["state"] == "placed" for v in again) == CAPACITY
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        for view in again:
            if view["state"] == "placed":
                client.post(f"{urls[0]}/v1/requests/{view['id']}/cancel")


def test_quota_holds_across_replicas(replicas: tuple[list[str], str]) -> None:
    urls, database = replicas
    token = new_tenant(urls[1], "thrifty", quota={"accelerators": 20})
    views = asyncio.run(submit_all(urls, token, 60))
    assert sum(v["state"] == "placed" for v in views) == 20
    assert all("quota" in v["reason"] for v in views if v["state"] == "rejected")
    with admin(urls[0]) as client:
        quota = client.get("/v1/tenants/thrifty/quota").json()
    assert quota["used_accelerators"] == 20 and quota["used_active_requests"] == 20
    asyncio.run(check_database(database))


def test_a_retry_after_a_cut_connection_never_reserves_twice(
    replicas: tuple[list[str], str],
) -> None:
    urls, database = replicas
    token = new_tenant(urls[0], "flaky")
    body = json.dumps(ONE_GPU).encode()
    host, port = urls[0].removeprefix("http://").split(":")
    raw = (
        f"POST /v1/requests HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Idempotency-Key: cut-1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(raw)
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "cut-1"}
    retries = [
        httpx.post(f"{url}/v1/requests", json=ONE_GPU, headers=headers, timeout=30) for url in urls
    ]
    assert {r.status_code for r in retries} <= {200, 201}
    ids = {r.json()["id"] for r in retries}
    assert len(ids) == 1
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        listed = client.get(f"{urls[1]}/v1/requests").json()["items"]
    assert [item["id"] for item in listed] == list(ids)
    with admin(urls[0]) as client:
        quota = client.get("/v1/tenants/flaky/quota").json()
    assert quota["used_accelerators"] <= 1 and quota["used_active_requests"] <= 1
    asyncio.run(check_database(database))
