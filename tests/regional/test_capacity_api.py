"""What the sites and links have free now over the operator API: a placed request's compute
leaves its site and its bandwidth every link of its path, and comes back when it is
cancelled; staff only."""

from typing import Any

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
    "constraints": {"regions_allowed": ["BJ"], "min_bandwidth_gbps": 10},
    "duration_hours": 1,
}
"""Two nodes of 6 A100 each and 10 Gbps: only BJ-dc-1 has A100 in Beijing."""


async def _views(api: Api) -> tuple[dict[str, Any], dict[str, Any]]:
    sites = await api.as_admin("GET", "/v1/capacity/sites")
    links = await api.as_admin("GET", "/v1/capacity/links")
    assert sites.status_code == links.status_code == 200, (sites.text, links.text)
    return {s["id"]: s for s in sites.json()}, {link["id"]: link for link in links.json()}


async def test_a_placed_request_takes_its_share_of_a_site_and_its_links(api: Api) -> None:
    sites, links = await _views(api)
    site = sites["BJ-dc-1"]
    assert (site["province"], site["region"]) == ("BJ", "north")
    assert site["capacity"]["accelerators"]["A100"] == 32
    assert site["free"] == site["capacity"] and site["utilisation"] == 0
    assert all(link["used_gbps"] == 0 and link["utilisation"] == 0 for link in links.values())
    _, _, user = await api.tenant()
    made = (await api.call(user, "POST", "/v1/requests", json=BEIJING_A100)).json()
    assert made["site"] == "BJ-dc-1", made
    path = [hop["link"] for seg in made["decision"]["path"]["segments"] for hop in seg["hops"]]
    assert path, made["decision"]["path"]

    sites, links = await _views(api)
    taken = sites["BJ-dc-1"]
    assert taken["free"]["accelerators"]["A100"] == 32 - 12
    assert taken["free"]["cpu_cores"] == site["capacity"]["cpu_cores"] - 16
    assert taken["free"]["memory_gib"] == site["capacity"]["memory_gib"] - 128
    capacity = site["capacity"]
    assert taken["utilisation"] == pytest.approx(
        max(12 / 32, 16 / capacity["cpu_cores"], 128 / capacity["memory_gib"])
    )
    for link_id in path:
        link = links[link_id]
        assert link["used_gbps"] == 10, link
        assert link["free_gbps"] == link["capacity_gbps"] - 10
        assert link["utilisation"] == pytest.approx(10 / link["capacity_gbps"])
    assert all(links[i]["used_gbps"] == 0 for i in links if i not in path)

    cancelled = await api.call(user, "POST", f"/v1/requests/{made['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    sites, links = await _views(api)
    assert sites["BJ-dc-1"] == site
    assert all(link["used_gbps"] == 0 for link in links.values())


async def test_only_staff_see_capacity(api: Api) -> None:
    _, admin, user = await api.tenant()
    for token in (admin, user):
        for path in ("/v1/capacity/sites", "/v1/capacity/links"):
            detail_of(await api.call(token, "GET", path), 403)
    detail_of(await api.call("ck_none.nothing", "GET", "/v1/capacity/sites"), 401)
