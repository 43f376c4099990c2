"""Submitting and cancelling requests at a member of a running federation, as its admin."""

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.federation_processes import LocalFederation

GPU_REQUEST = json.loads(
    (Path(__file__).parents[2] / "examples" / "requests" / "gpu-training.json").read_text()
)


def submit(federation: LocalFederation, region: str, body: dict[str, Any]) -> dict[str, Any]:
    """`body` (its `id` dropped) submitted at `region` for tenant acme (made if missing); the
    view of the request."""
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    url = federation.members[region].url
    httpx.post(f"{url}/v1/tenants", json={"id": "acme", "name": "Acme"}, headers=headers)
    body = {k: v for k, v in body.items() if k != "id"}
    answer = httpx.post(
        f"{url}/v1/requests", json={**body, "tenant": "acme"}, headers=headers, timeout=30
    )
    assert answer.status_code == 201, answer.text
    view: dict[str, Any] = answer.json()
    return view


def cancel(federation: LocalFederation, region: str, request_id: str) -> dict[str, Any]:
    """Cancel `request_id` at `region`; the view of the request."""
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    answer = httpx.post(
        f"{federation.members[region].url}/v1/requests/{request_id}/cancel",
        headers=headers,
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    view: dict[str, Any] = answer.json()
    return view


def get(federation: LocalFederation, region: str, path: str) -> Any:
    """GET `path` at `region`, as its admin; the answer's document (200 checked)."""
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    answer = httpx.get(f"{federation.members[region].url}{path}", headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


@contextlib.contextmanager
def link_down(federation: LocalFederation, region: str, link_id: str) -> Iterator[None]:
    """`link_id` reported down by `region`'s operator for the block, and up again after."""
    headers = {"Authorization": f"Bearer {federation.admin_token}"}
    url = f"{federation.members[region].url}/v1/links/{link_id}/state"
    down = httpx.put(
        url, json={"state": "down", "reason": "fibre cut"}, headers=headers, timeout=30
    )
    assert down.status_code == 200, down.text
    try:
        yield
    finally:
        up = httpx.put(url, json={"state": "up"}, headers=headers, timeout=30)
        assert up.status_code == 200, up.text
