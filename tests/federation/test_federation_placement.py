"""End to end on separate processes and PostgreSQL: a cross-region request is placed by
three brains, each reserving its own segment, and cancelling releases all three."""

import pytest

from tests.federation.ledgers import check_invariants, part, site_used, unreleased, used_mbps
from tests.federation.member_requests import GPU_REQUEST, cancel, submit
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
    assert west["site_id"] == decision["site"] and west["accelerator_count"] == 64
    assert west["counts_quota"] is False and east["counts_quota"] is True
    assert east["site_id"] is None and national["site_id"] is None
    assert national["cpu_m"] == 0 and east["cpu_m"] == west["cpu_m"] == 64_000
    assert (await site_used(databases["west"], decision["site"]))["H800"] == 64
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
