"""Two brain processes on one PostgreSQL database: concurrent submissions never oversubscribe
a site or a quota, and nothing stays reserved after cancellation or rejection."""

import asyncio
import json
import socket
from collections.abc import Iterator

import httpx
import pytest

from tests.federation.ledgers import check_invariants
from tests.processes import brains_on_a_new_database
from tests.regional.brain_api import ADMIN_TOKEN
from tests.regional.fifty_gpus import (
    CAPACITY,
    ONE_GPU,
    admin,
    fifty_gpu_map,
    new_tenant,
    submit_all,
)


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
    asyncio.run(check_invariants(database))
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        for i, view in enumerate(placed):
            answer = client.post(f"{urls[i % 2]}/v1/requests/{view['id']}/cancel")
            assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
    asyncio.run(check_invariants(database))
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
    asyncio.run(check_invariants(database))


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
    asyncio.run(check_invariants(database))
