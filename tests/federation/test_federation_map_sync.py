"""End to end on separate processes and PostgreSQL: a site registered on the west's brain
reaches the national brain's map on the west's summary stream, and becomes the candidate of a
cross-region request from the east; retired there, it leaves the national map again. The
federation's policy holds everywhere: a weight matrix and a priority class set on one region
hold on the other."""

import math
import time
from collections.abc import Iterator
from functools import cache
from typing import Any

import grpc
import httpx
import pytest

from cnbrain.netmap.china import china_document
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.v1 import national_pb2, national_pb2_grpc
from tests.federation.ledgers import check_invariants, rows, unreleased
from tests.federation.member_requests import GPU_REQUEST, cancel, get, submit
from tests.federation_processes import LocalFederation, local_federation
from tests.polling import until

TWIN_OF = "NX-hub-zhongwei"
FRESH = "NX-hub-fresh"


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from local_federation(
        tmp_path_factory.mktemp("mapsync"),
        regions=["east", "west"],
        database_prefix="cnbrain_fedmap",
        shared_env={"CNBRAIN_ADMISSION_INTERVAL_S": "0.5"},
    )


@cache
def federation_map() -> ComputeNetworkMap:
    return ComputeNetworkMap.from_document(china_document())


def _admin(federation: LocalFederation) -> dict[str, str]:
    return {"Authorization": f"Bearer {federation.admin_token}"}


def _rename(value: str) -> str:
    return FRESH if value == TWIN_OF else value


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_site_registered_on_a_region_becomes_a_cross_region_candidate(
    federation: LocalFederation,
) -> None:
    west = federation.members["west"].url
    site = next(s for s in get(federation, "west", "/v1/sites") if s["id"] == TWIN_OF)
    links = [
        {**link, "a": _rename(link["a"]), "b": _rename(link["b"])}
        for link in get(federation, "west", "/v1/links")
        if TWIN_OF in (link["a"], link["b"])
    ]
    body = {
        **GPU_REQUEST,
        "constraints": {**GPU_REQUEST["constraints"], "labels": {"pool": "fresh"}},
        "start": "queue",
        "max_wait_s": 600,
    }
    waiting = submit(federation, "east", body)
    assert waiting["state"] == "queued", waiting

    registered_at = time.monotonic()
    answer = httpx.post(
        f"{west}/v1/sites",
        json={"site": {**site, "id": FRESH, "labels": {"pool": "fresh"}}, "links": links},
        headers=_admin(federation),
        timeout=30,
    )
    assert answer.status_code == 201, answer.text

    async def placed() -> dict[str, Any] | None:
        view: dict[str, Any] = get(federation, "east", f"/v1/requests/{waiting['id']}")
        return view if view["state"] == "placed" else None

    view = await until(placed, "the request placed on the site registered on the west", 30)
    print(f"registered to placed across regions: {time.monotonic() - registered_at:.2f} s")
    assert view["site"] == FRESH
    owners = [(s["kind"], s["owner"]) for s in view["decision"]["path"]["segments"]]
    assert owners == [("source", "east"), ("backbone", "national"), ("destination", "west")]
    assert cancel(federation, "east", waiting["id"])["state"] == "cancelled"

    national = federation.databases["national"]
    assert await _status(national, FRESH) == "active"
    retired = httpx.delete(f"{west}/v1/sites/{FRESH}", headers=_admin(federation), timeout=30)
    assert retired.status_code == 204, retired.text

    async def gone() -> bool | None:
        return True if await _status(national, FRESH) == "retired" else None

    await until(gone, "the site retired in the national brain's map", 30)
    for url in federation.databases.values():
        assert await unreleased(url) == []
        await check_invariants(url)


async def _status(url: str, site_id: str) -> str | None:
    found = await rows(url, "SELECT status FROM sites WHERE id = $1", site_id)
    return str(found[0]["status"]) if found else None


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_weight_matrix_set_on_one_region_holds_for_the_whole_federation(
    federation: LocalFederation,
) -> None:
    matrix = get(federation, "east", "/v1/weight-matrix")
    green = {"cost": 0.5, "latency": 0.25, "energy": 3.0, "balance": 1.0}
    changed = {**matrix, "rows": {**matrix["rows"], "training": green}}
    east = federation.members["east"].url
    answer = httpx.put(
        f"{east}/v1/weight-matrix", json=changed, headers=_admin(federation), timeout=30
    )
    assert answer.status_code == 200, answer.text

    national = federation.databases["national"]
    [row] = await rows(
        national,
        "SELECT cost, latency, energy, balance FROM weight_matrix WHERE workload_class = $1",
        "training",
    )
    assert row == green

    async def followed() -> bool | None:
        west: dict[str, Any] = get(federation, "west", "/v1/weight-matrix")
        return True if west["rows"]["training"] == green else None

    await until(followed, "the west following the matrix set on the east", 30)
    assert get(federation, "east", "/v1/weight-matrix")["rows"]["training"] == green


WEST_H800_ZHONGWEI = 768
"""The H800 accelerators of the west's Zhongwei hub."""

URGENT = {"value": 990, "preemptible": False, "default_max_wait_s": 7200.0}


def _classes(federation: LocalFederation, region: str) -> dict[str, dict[str, Any]]:
    return {one["name"]: one for one in get(federation, region, "/v1/priority-classes")}


def _report_h800(federation: LocalFederation, site: str, used: int) -> None:
    answer = httpx.post(
        f"{federation.members['west'].url}/v1/sites/{site}/usage",
        json={"cpu_cores": 0, "memory_gib": 0, "accelerators": {"H800": used}},
        headers=_admin(federation),
        timeout=30,
    )
    assert answer.status_code == 204, answer.text


def _ningxia(priority_class: str, **extra: Any) -> dict[str, Any]:
    """64 H800 in Ningxia (the west's Zhongwei hub) for two hours, of `priority_class`."""
    return {
        "source_province": "NX",
        "resources": GPU_REQUEST["resources"],
        "constraints": {"regions_allowed": ["NX"]},
        "duration_hours": 2,
        "priority_class": priority_class,
        **extra,
    }


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_priority_class_put_on_one_region_orders_another_regions_queue(
    federation: LocalFederation,
) -> None:
    east, west = federation.members["east"].url, federation.members["west"].url
    assert "urgent" not in _classes(federation, "west")
    refused = httpx.post(
        f"{west}/v1/requests",
        json={**_ningxia("urgent"), "tenant": "acme"},
        headers=_admin(federation),
        timeout=30,
    )
    assert refused.status_code == 422, refused.text

    put_at = time.monotonic()
    answer = httpx.put(
        f"{east}/v1/priority-classes/urgent", json=URGENT, headers=_admin(federation), timeout=30
    )
    assert answer.status_code == 201, answer.text
    national = federation.databases["national"]
    [stored] = await rows(
        national,
        "SELECT value, preemptible, default_max_wait_s FROM priority_classes WHERE name = $1",
        "urgent",
    )
    assert stored == URGENT
    [audited] = await rows(
        national,
        "SELECT actor FROM audit_log WHERE action = 'priority_class.created' AND object_id = $1",
        "urgent",
    )
    assert audited["actor"].startswith("east:")

    async def followed() -> dict[str, Any] | None:
        return _classes(federation, "west").get("urgent")

    urgent = await until(followed, "the west following the class put on the east", 30)
    print(f"class put on the east to listed on the west: {time.monotonic() - put_at:.2f} s")
    assert urgent == {"name": "urgent", **URGENT, "default": False}

    # The west's Zhongwei hub full for two hours: a high and then an urgent request wait,
    # and the west's admission orders them by the classes' values (urgent 990 > high 900).
    _report_h800(federation, "NX-hub-zhongwei", WEST_H800_ZHONGWEI - 64)
    holder = submit(federation, "west", _ningxia("high"))
    assert holder["state"] == "placed", holder
    waiting = [
        submit(federation, "west", _ningxia(name, start="queue", max_wait_s=8 * 3600))
        for name in ("high", "urgent")
    ]
    assert [view["state"] for view in waiting] == ["queued", "queued"], waiting

    async def ordered() -> list[str] | None:
        items = get(federation, "west", "/v1/queue")["items"]
        ids = [item["id"] for item in sorted(items, key=lambda item: item["position"])]
        return ids if {view["id"] for view in waiting} <= set(ids) else None

    order = await until(ordered, "both requests in the west's queue", 30)
    assert order.index(waiting[1]["id"]) < order.index(waiting[0]["id"])

    for view in [*waiting, holder]:
        assert cancel(federation, "west", view["id"])["state"] == "cancelled"
    _report_h800(federation, "NX-hub-zhongwei", 0)
    deleted = httpx.delete(f"{west}/v1/priority-classes/urgent", headers=_admin(federation))
    assert deleted.status_code == 204, deleted.text

    async def gone() -> bool | None:
        return True if "urgent" not in _classes(federation, "east") else None

    await until(gone, "the east following the class deleted on the west", 30)
    assert not await rows(national, "SELECT name FROM priority_classes WHERE name = 'urgent'")


@pytest.mark.asyncio
@pytest.mark.slow
async def test_the_national_brain_checks_what_peers_send_of_classes_and_endpoints(
    federation: LocalFederation,
) -> None:
    token = federation.members["national"].env["CNBRAIN_PEER_TOKEN"]
    metadata = (("authorization", f"Bearer {token}"),)
    good = {"name": "urgent", "value": 990, "preemptible": False, "default_max_wait_s": 60.0}
    async with grpc.aio.insecure_channel(f"127.0.0.1:{federation.national_port}") as channel:
        stub = national_pb2_grpc.NationalBrainServiceStub(channel)

        async def put(region: str = "east", **fields: Any) -> grpc.StatusCode:
            one = national_pb2.PriorityClass(**{**good, **fields})
            try:
                await stub.PutPriorityClass(
                    national_pb2.PutPriorityClassRequest(
                        priority_class=one, region_id=region, actor="test"
                    ),
                    metadata=metadata,
                    timeout=10,
                )
            except grpc.aio.AioRpcError as error:
                return error.code()
            return grpc.StatusCode.OK

        async def delete(name: str) -> grpc.StatusCode:
            try:
                await stub.DeletePriorityClass(
                    national_pb2.DeletePriorityClassRequest(
                        name=name, region_id="east", actor="test"
                    ),
                    metadata=metadata,
                    timeout=10,
                )
            except grpc.aio.AioRpcError as error:
                return error.code()
            return grpc.StatusCode.OK

        async def register(endpoint: str) -> grpc.StatusCode:
            provinces = sorted(
                c for c, p in federation_map().provinces.items() if p.region == "east"
            )
            try:
                await stub.RegisterRegion(
                    national_pb2.RegisterRegionRequest(
                        region_id="east", endpoint=endpoint, provinces=provinces
                    ),
                    metadata=metadata,
                    timeout=10,
                )
            except grpc.aio.AioRpcError as error:
                return error.code()
            return grpc.StatusCode.OK

        invalid = grpc.StatusCode.INVALID_ARGUMENT
        assert await put(name="a/b") == invalid
        assert await put(value=10**9 + 1) == invalid
        assert await put(default_max_wait_s=math.nan) == invalid
        assert await put(default_max_wait_s=math.inf) == invalid
        assert await put(value=900) == grpc.StatusCode.FAILED_PRECONDITION  # high's value
        assert await put(region="nowhere") == grpc.StatusCode.UNAVAILABLE
        assert await delete("normal") == grpc.StatusCode.FAILED_PRECONDITION  # the default
        assert await delete("nope") == grpc.StatusCode.NOT_FOUND
        assert await delete("a b") == invalid
        assert await register("bad host:1") == invalid
        assert await register("h" * 250 + ".example:50051") == invalid
        assert await register("127.0.0.1") == invalid

    names = await rows(federation.databases["national"], "SELECT name FROM priority_classes")
    assert sorted(r["name"] for r in names) == ["high", "low", "normal"]
    taken = httpx.put(
        f"{federation.members['east'].url}/v1/priority-classes/urgent",
        json={**URGENT, "value": 900},
        headers=_admin(federation),
        timeout=30,
    )
    assert taken.status_code == 409, taken.text
    assert "already the value of class 'high'" in taken.json()["detail"]


@pytest.mark.asyncio
@pytest.mark.slow
async def test_the_national_brain_refuses_a_summary_whose_site_load_is_not_a_share(
    federation: LocalFederation,
) -> None:
    token = federation.members["national"].env["CNBRAIN_PEER_TOKEN"]
    metadata = (("authorization", f"Bearer {token}"),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{federation.national_port}") as channel:
        stub = national_pb2_grpc.NationalBrainServiceStub(channel)

        async def report(*loads: tuple[str, float]) -> tuple[grpc.StatusCode, str]:
            # Sequence 0: a summary taken is not newer than the east's own, which stay.
            summary = national_pb2.RegionSummary(
                region_id="east",
                sequence=0,
                site_loads=[national_pb2.SiteLoad(site_id=s, utilisation=u) for s, u in loads],
            )
            try:
                answer = await stub.ReportSummaries(
                    iter([national_pb2.ReportSummariesRequest(summary=summary)]),
                    metadata=metadata,
                    timeout=10,
                )
            except grpc.aio.AioRpcError as error:
                return error.code(), error.details() or ""
            return grpc.StatusCode.OK, str(answer.received)

        for share in (math.nan, math.inf, -0.5, 1.5):
            code, details = await report(("ZJ-dc-1", 0.5), ("SH-dc-1", share))
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (share, code)
            assert details.startswith("summary.site_loads[1].utilisation: must be finite"), details
        code, details = await report(("ZJ-dc-1", 0.5), ("ZJ-dc-1", 0.5))
        assert (code, details) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "summary.site_loads[1].site_id: site 'ZJ-dc-1' is named twice",
        )
        # A site of the west's, or none of the map's, is left out; the rest is taken.
        assert await report(("ZJ-dc-1", 0.5), ("NX-hub-zhongwei", 0.5), ("nowhere", 1.0)) == (
            grpc.StatusCode.OK,
            "1",
        )
