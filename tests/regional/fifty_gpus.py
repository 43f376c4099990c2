"""A capacity race on the tiny map with 50 A100s reachable from AA: the map, one-GPU requests,
and submitting many at once to brain processes over HTTP."""

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import httpx

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
    """Write the map to `path` (JSON); its path as text, for a brain's `--map`."""
    raw = copy.deepcopy(tiny_map_raw())
    for site in raw["sites"]:
        if site["id"] == "CC-hub":
            site["capacity"]["accelerators"] = {"A100": 30}
            site["prices"]["accelerator_hour"] = {"A100": 8.0}
    path.write_text(json.dumps(raw), encoding="utf-8")
    return str(path)


def admin(url: str) -> httpx.Client:
    """A client of the brain at `url`, as its admin."""
    return httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30
    )


def new_tenant(url: str, name: str, quota: dict[str, Any] | None = None) -> str:
    """A new tenant `name` (with `quota`) with one tenant user; that user's API key."""
    with admin(url) as client:
        assert client.post("/v1/tenants", json={"id": name, "name": name}).status_code == 201
        if quota:
            assert client.put(f"/v1/tenants/{name}/quota", json=quota).status_code == 200
        user = client.post(
            "/v1/users", json={"name": "u", "role": "tenant-user", "tenant": name}
        ).json()
        token: str = client.post(f"/v1/users/{user['id']}/api-keys").json()["token"]
        return token


async def submit_all(
    urls: list[str], token: str, count: int, body: dict[str, Any] = ONE_GPU
) -> list[dict[str, Any]]:
    """`count` requests of `body` at once, spread over `urls`; the views of all of them."""
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=100)
    async with httpx.AsyncClient(headers=headers, timeout=120, limits=limits) as client:
        answers = await asyncio.gather(
            *(client.post(f"{urls[i % len(urls)]}/v1/requests", json=body) for i in range(count))
        )
    assert all(a.status_code == 201 for a in answers), [
        a.text for a in answers if a.status_code != 201
    ][:3]
    return [a.json() for a in answers]
