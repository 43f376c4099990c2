"""A site's nodes over the operator API: its pools with what the brain's reservations leave
free, staff only; a simulated site reports no nodes of its own."""

import pytest

from tests.regional.brain_api import Api, detail_of

pytestmark = pytest.mark.asyncio(loop_scope="module")

BEIJING_A100 = {
    "source_province": "BJ",
    "resources": {
        "nodes": 2,
        "cpu": 8,
        "memory_gib": 64,
        "accelerator": {"model": "A100", "count": 6},
    },
    "constraints": {"regions_allowed": ["BJ"]},
    "duration_hours": 1,
}
"""Two nodes of 6 A100: only BJ-dc-1 has A100 in Beijing (4 nodes of 8)."""


async def test_a_sites_pools_show_what_its_reservations_leave_free(api: Api) -> None:
    before = await api.as_admin("GET", "/v1/sites/BJ-dc-1/nodes")
    assert before.status_code == 200, before.text
    view = before.json()
    assert (view["site"], view["reported"], view["reported_error"]) == ("BJ-dc-1", None, None)
    a100 = next(p for p in view["pools"] if p["accelerator"] == "A100")
    assert (a100["count"], a100["accelerators"]) == (4, 8)
    assert a100["nodes_by_free"] == [0] * 8 + [4] and a100["shared_by_free"] == []
    assert a100["held"] == []
    _, _, user = await api.tenant()
    made = await api.call(user, "POST", "/v1/requests", json=BEIJING_A100)
    assert made.json()["site"] == "BJ-dc-1", made.text
    after = (await api.as_admin("GET", "/v1/sites/BJ-dc-1/nodes")).json()
    a100 = next(p for p in after["pools"] if p["accelerator"] == "A100")
    assert a100["nodes_by_free"] == [0, 0, 2, 0, 0, 0, 0, 0, 2]
    assert a100["held"] == [[6, 0, 2]]  # two node takes of 6 A100
    cancelled = await api.call(user, "POST", f"/v1/requests/{made.json()['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    again = (await api.as_admin("GET", "/v1/sites/BJ-dc-1/nodes")).json()
    assert again["pools"] == view["pools"]


async def test_only_staff_see_a_sites_nodes_and_an_unknown_site_is_404(api: Api) -> None:
    _, _, user = await api.tenant()
    detail_of(await api.call(user, "GET", "/v1/sites/BJ-dc-1/nodes"), 403)
    assert "ZZ-nowhere" in detail_of(await api.as_admin("GET", "/v1/sites/ZZ-nowhere/nodes"), 404)
