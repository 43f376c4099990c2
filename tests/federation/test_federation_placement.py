"""End to end on separate processes and PostgreSQL: a cross-region request is placed by
three brains, each reserving its own segment, and cancelling releases all three; the routes
between two sites are composed of their owners' segments, asked on any brain; a request with
flows is planned by its region's brain within what it owns, and by the national brain when
its flows cross the backbone, every owner holding its links of each flow over its window."""

import time
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.load import load_map
from cnbrain.routing.router import SegmentRouter
from tests.federation.ledgers import (
    check_invariants,
    part,
    rows,
    site_used,
    unreleased,
    used_mbps,
)
from tests.federation.member_requests import GPU_REQUEST, cancel, get, submit
from tests.federation_processes import LocalFederation


@pytest.mark.asyncio
@pytest.mark.slow
async def test_gpu_request_from_the_east_is_placed_in_a_western_hub_by_three_brains(
    federation: LocalFederation,
) -> None:
    databases = federation.databases
    view = submit(federation, "east", GPU_REQUEST)

    assert view["state"] == "placed", view
    decision = view["decision"]
    assert decision["site_kind"] == "hub"
    segments = decision["path"]["segments"]
    assert [(s["kind"], s["owner"]) for s in segments] == [
        ("source", "east"),
        ("backbone", "national"),
        ("destination", "west"),
    ]
    reservation = decision["reservation_id"]
    mbps = 20_000
    parts = {owner: await part(databases[owner], reservation) for owner in databases}
    assert parts["north"] is None and parts["south"] is None
    for segment in segments:
        own = parts[segment["owner"]]
        assert own is not None and own["state"] == "held"
        assert own["links"] == sorted(h["link"] for h in segment["hops"])
        assert own["mbps"] == mbps
        used = await used_mbps(databases[segment["owner"]], own["links"])
        assert used == dict.fromkeys(own["links"], mbps)
    west, east, national = parts["west"], parts["east"], parts["national"]
    assert west is not None and east is not None and national is not None
    assert west["site_id"] == decision["site"] and west["accelerator_milli"] == 64_000
    assert west["counts_quota"] is False and east["counts_quota"] is True
    assert east["site_id"] is None and national["site_id"] is None
    assert national["cpu_m"] == 0 and east["cpu_m"] == west["cpu_m"] == 64_000
    assert (await site_used(databases["west"], decision["site"]))["H800"] == 64_000
    assert west["decision"] is not None and national["decision"] is not None
    for url in databases.values():
        await check_invariants(url)

    cancelled = cancel(federation, "east", view["id"])

    assert cancelled["state"] == "cancelled"
    for owner in ("east", "national", "west"):
        assert await unreleased(databases[owner]) == []
        own = parts[owner]
        assert own is not None
        assert set((await used_mbps(databases[owner], own["links"])).values()) == {0}
    assert (await site_used(databases["west"], decision["site"]))["H800"] == 0
    for url in databases.values():
        await check_invariants(url)


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_request_that_fits_in_its_own_province_stays_there(
    federation: LocalFederation,
) -> None:
    databases = federation.databases
    body = {
        "source_province": "ZJ",
        "resources": {"cpu": 4.0, "memory_gib": 8.0},
        "duration_hours": 1.0,
        "workload_class": "batch",
    }
    view = submit(federation, "east", body)

    assert view["state"] == "placed"
    assert view["decision"]["province"] == "ZJ"
    assert [s["kind"] for s in view["decision"]["path"]["segments"]] == ["local"]
    assert await unreleased(databases["national"]) == []
    cancel(federation, "east", view["id"])


def test_routes_between_sites_are_composed_of_their_owners_segments(
    federation: LocalFederation,
) -> None:
    arrays = MapArrays.build(load_map("china"))
    whole = SegmentRouter(arrays)
    index = arrays.map.site_index
    links = arrays.map.links
    # Asked on the north's brain: neither site is its own.
    view = get(federation, "north", "/v1/routes?from_site=SH-dc-1&to_site=NX-hub-zhongwei")
    expected = whole.site_routes(from_site=index["SH-dc-1"], to_site=index["NX-hub-zhongwei"], k=3)
    routes = view["routes"]
    assert len(routes) == 3
    assert [[link for s in r["segments"] for link in s["links"]] for r in routes] == [
        [links[j].id for j in r.links] for r in expected
    ]
    for route in routes:
        assert [(s["kind"], s["owner"]) for s in route["segments"]] == [
            ("source", "east"),
            ("backbone", "national"),
            ("destination", "west"),
        ]
        assert route["segments"][0]["nodes"][0] == "SH-dc-1"
        assert route["segments"][-1]["nodes"][-1] == "NX-hub-zhongwei"
        assert route["free_gbps"] > 0
    local = get(federation, "west", "/v1/routes?from_site=SH-dc-1&to_site=SH-dc-2&routes=1")
    [one] = local["routes"]
    assert [(s["kind"], s["owner"]) for s in one["segments"]] == [("local", "east")]
    # No link has 100 Tbps free: no route.
    wide = "/v1/routes?from_site=SH-dc-1&to_site=NX-hub-zhongwei&min_free_gbps=100000"
    assert get(federation, "east", wide)["routes"] == []
    answer = httpx.get(
        f"{federation.members['east'].url}/v1/routes?from_site=nowhere&to_site=SH-dc-1",
        headers={"Authorization": f"Bearer {federation.admin_token}"},
        timeout=30,
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == "from_site", answer.text


def _flows_request(source_site: str) -> dict[str, Any]:
    """8 H20 from Zhejiang for an hour, whose 10 GB dataset is at `source_site`."""
    return {
        "source_province": "ZJ",
        "resources": {"cpu": 4, "memory_gib": 8, "accelerator": {"model": "H20", "count": 8}},
        "duration_hours": 1,
        "start": "queue",
        "flows": {
            "staging": [{"source": {"site": source_site}, "volume_gb": 10, "max_rate_gbps": 10}]
        },
    }


def _settled(federation: LocalFederation, request_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        view: dict[str, Any] = get(federation, "east", f"/v1/requests/{request_id}")
        if view["state"] != "queued" or time.monotonic() > deadline:
            return view
        time.sleep(0.2)


def test_a_request_with_flows_within_its_region_is_planned_by_its_regions_brain(
    federation: LocalFederation,
) -> None:
    within = submit(federation, "east", _flows_request("ZJ-dc-2"))
    placed = _settled(federation, within["id"])
    assert placed["state"] == "placed" and placed["site"] == "ZJ-dc-1", placed
    [staging] = placed["flows"]
    assert staging["kind"] == "staging" and staging["mbps"] == 10_000
    assert all(link.startswith("ZJ-") for link in staging["links"]), staging
    assert placed["decision"]["reservation_id"] is not None
    assert datetime.fromisoformat(placed["decision"]["starts_at"]) == datetime.fromisoformat(
        staging["end"]
    )
    cancel(federation, "east", within["id"])


STAGED_IN_THE_WEST = {
    "source_province": "SH",
    "resources": {"cpu": 4, "memory_gib": 8, "accelerator": {"model": "Ascend910B", "count": 8}},
    "duration_hours": 1,
    "start": "queue",
    "constraints": {"regions_allowed": ["west"]},
    "flows": {"staging": [{"source": {"site": "SH-dc-1"}, "volume_gb": 10, "max_rate_gbps": 10}]},
}
"""8 Ascend910B in the west for an hour, from Shanghai, whose 10 GB dataset is at SH-dc-1."""


async def _flows_held(url: str, reservation_id: str) -> list[dict[str, Any]]:
    return await rows(
        url,
        "SELECT f.kind, f.mbps, f.start_at, f.end_at, array_agg(l.link_id ORDER BY l.position)"
        " AS links FROM reservation_flows f JOIN reservation_flow_links l ON l.flow_id = f.id"
        " WHERE f.reservation_id = $1 GROUP BY f.id",
        reservation_id,
    )


@pytest.mark.asyncio
async def test_flows_that_cross_the_backbone_are_held_by_every_owner_of_their_route(
    federation: LocalFederation,
) -> None:
    databases = federation.databases
    china = load_map("china")
    owners = {link.id: link.owner for link in china.links}
    view = submit(federation, "east", STAGED_IN_THE_WEST)
    placed = _settled(federation, view["id"])

    assert placed["state"] == "placed", placed
    decision = placed["decision"]
    assert china.provinces[decision["province"]].region == "west", decision
    reservation = decision["reservation_id"]
    held = {owner: await _flows_held(url, reservation) for owner, url in databases.items()}
    assert {owner for owner, flows in held.items() if flows} == {"east", "national", "west"}
    assert held["north"] == [] and held["south"] == []
    windows = set()
    for owner in ("east", "national", "west"):
        [staging] = held[owner]
        assert staging["kind"] == "staging" and staging["mbps"] == 10_000
        assert {owners[link] for link in staging["links"]} == {owner}, staging
        windows.add((staging["start_at"], staging["end_at"]))
    [(start, end)] = windows  # one window, every owner: 10 GB at 10 Gbps
    assert (end - start).total_seconds() == 8
    assert datetime.fromisoformat(decision["starts_at"]) == end
    west = await part(databases["west"], reservation)
    assert west is not None and west["site_id"] == decision["site"]
    assert west["accelerator_milli"] == 8000 and west["state"] == "held"
    assert west["end_at"] == end + timedelta(hours=1)
    for url in databases.values():
        await check_invariants(url)

    cancel(federation, "east", view["id"])

    for owner, url in databases.items():
        assert await _flows_held(url, reservation) == [], owner
        await check_invariants(url)


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_request_no_region_can_place_is_rejected_with_the_national_explanation(
    federation: LocalFederation,
) -> None:
    too_far = {**GPU_REQUEST, "constraints": {**GPU_REQUEST["constraints"], "max_latency_ms": 1}}
    view = submit(federation, "east", too_far)

    assert view["state"] == "rejected", view
    decision = view["decision"]
    assert decision["reason"].startswith("no region could place it: no site meets")
    explanation = decision["explanation"]
    assert explanation is not None and explanation["sites_feasible"] == 0
    by_filter = {r["plugin"]: r for r in explanation["rejections"]}
    assert "latency_bound" in by_filter, by_filter
    assert sum(r["sites"] for r in explanation["rejections"]) <= explanation["sites_total"]
