"""Groups over the tenant API on PostgreSQL and Redis: members placed together on one site or
spread over sites of their own, all of them or none; a bad member refuses the whole group
and stores nothing."""

import json
from pathlib import Path
from typing import Any

import pytest

from tests.regional.bodies import GPU_TRAINING, LOCAL_CPU
from tests.regional.brain_api import Api

pytestmark = pytest.mark.asyncio(loop_scope="module")

REPLICAS = Path(__file__).parents[2] / "examples" / "requests" / "inference-replicas.json"
"""Three inference replicas from Guangdong, spread (the README's example)."""


def h100_nodes(nodes: int) -> dict[str, Any]:
    """A request from Shanghai for `nodes` nodes of 8 H100 (1024 H100 on the map, all at SH)."""
    return {
        "source_province": "SH",
        "resources": {
            "nodes": nodes,
            "cpu": 8,
            "memory_gib": 32,
            "accelerator": {"model": "H100", "count": 8},
        },
        "duration_hours": 1,
    }


async def test_members_placed_together_share_one_site(api: Api) -> None:
    tenant, _, user = await api.tenant()
    body = {"id": "trainers", "placement": "together", "requests": [GPU_TRAINING, GPU_TRAINING]}
    made = await api.call(user, "POST", "/v1/request-groups", json=body)
    assert made.status_code == 201, made.text
    group = made.json()
    assert (group["id"], group["state"], group["reason"]) == ("trainers", "placed", None)
    members = group["requests"]
    assert [m["state"] for m in members] == ["placed", "placed"]
    assert members[0]["site"] == members[1]["site"] is not None
    for member in members:
        read = await api.call(user, "GET", f"/v1/requests/{member['id']}")
        assert read.json()["state"] == "placed"
    quota = (await api.call(user, "GET", f"/v1/tenants/{tenant}/quota")).json()
    assert quota["used_accelerators"] == 16 and quota["used_active_requests"] == 2
    await api.invariants()


async def test_replicas_spread_each_get_a_site_of_their_own(api: Api) -> None:
    _, _, user = await api.tenant()
    body = json.loads(REPLICAS.read_text())
    made = await api.call(user, "POST", "/v1/request-groups", json=body)
    assert made.status_code == 201, made.text
    group = made.json()
    assert group["id"] == "chat-replicas" and group["state"] == "placed"
    unnamed = {"placement": "spread", "requests": [LOCAL_CPU] * 2}
    named = (await api.call(user, "POST", "/v1/request-groups", json=unnamed)).json()["id"]
    assert named.startswith("grp-")
    sites = [m["site"] for m in group["requests"]]
    assert len(set(sites)) == 3, sites


async def test_a_group_that_cannot_be_placed_whole_is_rejected_whole(api: Api) -> None:
    tenant, _, user = await api.tenant()
    # 100 nodes fit the 128 nodes of H100 alone; two of them together do not.
    assert (await api.call(user, "POST", "/v1/quotes", json=h100_nodes(100))).json()["decision"][
        "status"
    ] == "placed"
    body = {"id": "big", "placement": "together", "requests": [h100_nodes(100)] * 2}
    made = await api.call(user, "POST", "/v1/request-groups", json=body)
    assert made.status_code == 201, made.text
    group = made.json()
    assert group["state"] == "rejected" and group["reason"].startswith("group 'big': ")
    assert [m["state"] for m in group["requests"]] == ["rejected", "rejected"]
    quota = (await api.call(user, "GET", f"/v1/tenants/{tenant}/quota")).json()
    assert quota["used_accelerators"] == 0 and quota["used_active_requests"] == 0
    await api.invariants()


@pytest.mark.parametrize(
    ("members", "field"),
    [
        (
            [LOCAL_CPU, {**LOCAL_CPU, "resources": {"cpu": -1, "memory_gib": 1}}],
            "requests.1.resources.cpu",
        ),
        ([{**LOCAL_CPU, "start": "queue"}, LOCAL_CPU], "requests.0.start"),
        ([LOCAL_CPU], "requests"),
    ],
)
async def test_a_bad_member_refuses_the_group_naming_it_and_stores_nothing(
    api: Api, members: list[dict[str, Any]], field: str
) -> None:
    _, _, user = await api.tenant()
    body = {"placement": "together", "requests": members}
    answer = await api.call(user, "POST", "/v1/request-groups", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == field
    assert (await api.call(user, "GET", "/v1/requests")).json()["items"] == []
