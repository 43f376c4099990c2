"""End to end on separate processes and PostgreSQL: every read, and a cancel, from any brain
(`docs/federation.md`, "Any brain, any request"). A tenant's request submitted through the
north is cancelled from the east; the east's listing holds the tenant's requests of the
north, the west and the east, each once over pages of a few; usage read on the east is the
sum of what each region holds; another tenant sees none of it; with the north down, the
listing and usage are 503 naming it; a tampered cursor is refused naming it. The queries
between brains are checked by the national brain and by the region asked.

Every site runs on a fast simulator (an hour a second), so the jobs end and are metered."""

import base64
import json
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from cnbrain.domain.backend_ref import BackendRef
from cnbrain.netmap.china import china_document
from cnbrain.netmap.files import write_map_document
from cnbrain.v1 import common_pb2, national_pb2, national_pb2_grpc, regional_pb2, regional_pb2_grpc
from tests.federation_processes import LocalFederation, local_federation
from tests.polling import until

WITHIN_S = 30.0
REGIONS = ("east", "north", "south", "west")
PROVINCES = {"north": "BJ", "west": "SC", "east": "ZJ"}
"""A province of each region the tenant submits to."""


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    workdir = tmp_path_factory.mktemp("reads")
    document = china_document()
    fast = {"kind": "simulator", "time_scale": 3600}
    sites = tuple(
        s.model_copy(update={"execution": BackendRef.model_validate(fast)}) for s in document.sites
    )
    map_file = workdir / "china-simulated.json"
    write_map_document(document.model_copy(update={"sites": sites}), map_file)
    yield from local_federation(
        workdir,
        database_prefix="cnbrain_fedreads",
        shared_env={
            "CNBRAIN_MAP": str(map_file),
            "CNBRAIN_EXECUTION_POLL_S": "0.2",
            "CNBRAIN_TENANCY_INTERVAL_S": "0.5",
        },
    )


def _url(federation: LocalFederation, region: str) -> str:
    return federation.members[region].url


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _get(
    federation: LocalFederation, region: str, path: str, key: dict[str, str], **params: Any
) -> httpx.Response:
    return httpx.get(f"{_url(federation, region)}{path}", headers=key, params=params, timeout=60)


async def _tenant_key(federation: LocalFederation, tenant: str, on: str) -> dict[str, str]:
    """A key of a new user of new tenant `tenant`, made on `on`'s brain, once every brain
    knows it (a forwarded listing on every brain answers it)."""
    admin = _bearer(federation.admin_token)
    url = _url(federation, on)
    made = httpx.post(f"{url}/v1/tenants", json={"id": tenant, "name": tenant}, headers=admin)
    assert made.status_code == 201, made.text
    user = httpx.post(
        f"{url}/v1/users",
        json={"name": f"{tenant}-user", "role": "tenant-user", "tenant": tenant},
        headers=admin,
    )
    assert user.status_code == 201, user.text
    key_made = httpx.post(f"{url}/v1/users/{user.json()['id']}/api-keys", headers=admin)
    assert key_made.status_code == 201, key_made.text
    key = _bearer(key_made.json()["token"])
    for region in REGIONS:

        async def known(region: str = region) -> bool | None:
            return _get(federation, region, "/v1/requests", key).status_code == 200 or None

        await until(known, f"the key working for the listing on {region}", WITHIN_S)
    return key


def _job(province: str) -> dict[str, Any]:
    return {
        "source_province": province,
        "resources": {"cpu": 1, "memory_gib": 1},
        "duration_hours": 1,
        "job": {"command": "true", "max_attempts": 1},
    }


def _submit(federation: LocalFederation, on: str, province: str, key: dict[str, str]) -> str:
    made = httpx.post(
        f"{_url(federation, on)}/v1/requests", json=_job(province), headers=key, timeout=60
    )
    assert made.status_code == 201, made.text
    request_id: str = made.json()["id"]
    return request_id


def _all_pages(
    federation: LocalFederation, on: str, path: str, key: dict[str, str], **params: Any
) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    while True:
        answer = _get(federation, on, path, key, **params, **({"cursor": cursor} if cursor else {}))
        assert answer.status_code == 200, answer.text
        pages.append(answer.json()["items"])
        cursor = answer.json()["next_cursor"]
        if cursor is None:
            return pages
        assert len(pages) < 100


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_request_is_cancelled_and_every_request_and_usage_read_from_any_brain(
    federation: LocalFederation,
) -> None:
    key = await _tenant_key(federation, "hooli", on="west")
    stranger = await _tenant_key(federation, "initrode", on="south")
    east = _url(federation, "east")

    through_north = _submit(federation, "north", PROVINCES["north"], key)
    cancelled = httpx.post(f"{east}/v1/requests/{through_north}/cancel", headers=key, timeout=60)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["id"] == through_north
    assert cancelled.json()["state"] == "cancelled", cancelled.text
    on_north = _get(federation, "north", f"/v1/requests/{through_north}", key)
    assert on_north.json()["state"] == "cancelled", "cancelled where it lives"
    again_east = httpx.post(f"{east}/v1/requests/{through_north}/cancel", headers=key, timeout=60)
    again_north = httpx.post(
        f"{_url(federation, 'north')}/v1/requests/{through_north}/cancel", headers=key, timeout=60
    )
    assert again_east.status_code == again_north.status_code == 409, again_east.text
    hidden = httpx.post(f"{east}/v1/requests/{through_north}/cancel", headers=stranger, timeout=60)
    assert hidden.status_code == 404, hidden.text

    mine = {through_north}
    for region, on in (("north", "east"), ("west", "west"), ("east", "east"), ("north", "north")):
        for _ in range(3):
            mine.add(_submit(federation, on, PROVINCES[region], key))
    theirs = _submit(federation, "south", "GD", stranger)

    pages = _all_pages(federation, "east", "/v1/requests", key, limit=4)
    listed = [view["id"] for page in pages for view in page]
    assert len(pages) >= 3 and all(len(page) == 4 for page in pages[:-1]), [len(p) for p in pages]
    assert len(listed) == len(set(listed)), "no request twice"
    assert set(listed) == mine, "every request of the tenant, of every region"
    created = [(view["created_at"], view["id"]) for page in pages for view in page]
    assert created == sorted(created, reverse=True), "newest first"
    on_west = [
        v["id"] for p in _all_pages(federation, "west", "/v1/requests", key, limit=7) for v in p
    ]
    assert on_west == listed, "the same listing on every brain"
    gone = _all_pages(federation, "east", "/v1/requests", key, limit=50, state="cancelled")
    assert [v["id"] for v in gone[0]] == [through_north]

    other = [v["id"] for p in _all_pages(federation, "east", "/v1/requests", stranger) for v in p]
    assert other == [theirs]

    # Each brain's own first admin is known to that brain only: it reads that brain's part,
    # so the sum of the four is what each region holds.
    admin = _bearer(federation.admin_token)

    async def ended() -> bool | None:
        done = _all_pages(federation, "east", "/v1/requests", key, limit=50, state="completed")
        return len(done[0]) == len(mine) - 1 or None

    await until(ended, "the tenant's twelve jobs completed", 120.0, every_s=0.5)
    report = _get(federation, "east", "/v1/usage/report", key).json()
    parts = {
        region: _get(federation, region, "/v1/usage/report", admin, tenant="hooli").json()
        for region in REGIONS
    }
    assert {r for r, p in parts.items() if p["rows"]} == {"north", "west", "east"}
    for field in ("records", "cost_cny", "cpu_core_hours", "elapsed_s"):
        summed = sum(p["tenants"].get("hooli", {}).get(field, 0) for p in parts.values())
        assert report["tenants"]["hooli"][field] == pytest.approx(summed), field
    assert sorted(r["site"] for r in report["rows"]) == sorted(
        r["site"] for p in parts.values() for r in p["rows"]
    )
    usage_pages = _all_pages(federation, "east", "/v1/usage", key, limit=4)
    records = [(r["ended_at"], r["site"], r["id"]) for page in usage_pages for r in page]
    count = report["tenants"]["hooli"]["records"]
    assert count >= 12, "a record of each completed job"
    assert len(records) == len(set(records)) == count
    assert len(usage_pages) == -(-count // 4) >= 3
    first = _get(federation, "east", "/v1/usage", key).json()
    assert first["totals"]["records"] == count
    assert first["totals"]["cost_cny"] == pytest.approx(report["tenants"]["hooli"]["cost_cny"])
    csv = _get(federation, "east", "/v1/usage/report", key, format="csv")
    assert csv.status_code == 200 and len(csv.text.strip().splitlines()) == 1 + len(report["rows"])
    own = _get(federation, "east", "/v1/usage", stranger).json()
    assert {(r["tenant"], r["request"]) for r in own["items"]} <= {("initrode", theirs)}
    assert own["totals"]["records"] == len(own["items"]), "its own job's records alone"
    assert "hooli" not in _get(federation, "east", "/v1/usage/report", stranger).json()["tenants"]

    tampered = base64.urlsafe_b64encode(json.dumps(["2026-12-01", 7]).encode()).decode()
    for path in ("/v1/requests", "/v1/usage"):
        refused = _get(federation, "east", path, key, cursor=tampered)
        assert refused.status_code == 422, refused.text
        assert refused.json()["errors"][0]["field"] == "cursor", refused.text

    federation.kill("north")
    try:
        for path in ("/v1/requests", "/v1/usage", "/v1/usage/report"):
            down = _get(federation, "east", path, key)
            assert down.status_code == 503, (path, down.text)
            assert "region 'north'" in down.json()["detail"], down.text
            assert down.headers["retry-after"]
        alone = _get(federation, "east", "/v1/requests", admin)
        assert alone.status_code == 200, "a brain's own admin reads its own part"
    finally:
        federation.start_member("north")
        federation.wait_registered()

    async def whole() -> list[str] | None:
        back = _get(federation, "east", "/v1/requests", key, limit=500)
        return [v["id"] for v in back.json()["items"]] if back.status_code == 200 else None

    assert await until(whole, "the listing whole again", WITHIN_S, every_s=0.5) == listed


def _peer(federation: LocalFederation) -> tuple[tuple[str, str]]:
    token = federation.members["national"].env["CNBRAIN_PEER_TOKEN"]
    return (("authorization", f"Bearer {token}"),)


LISTING = json.dumps({"state": None, "limit": 5, "cursor": None})


def _query(**fields: Any) -> common_pb2.ForwardedCall:
    return common_pb2.ForwardedCall(
        operation=common_pb2.FORWARDED_OPERATION_LIST,
        caller=common_pb2.Caller(user_id="u-1", role="operator"),
        **{"body_json": LISTING, **fields},
    )


@pytest.mark.slow
def test_queries_are_checked_by_the_national_brain_and_the_region_asked(
    federation: LocalFederation,
) -> None:
    wrong: list[tuple[common_pb2.ForwardedCall, str]] = [
        (_query(), "region_id"),
        (_query(region_id="east"), "its own queries"),
        (_query(region_id="north", body_json='{"limit": 5}'), "body_json"),
        (_query(region_id="north", body_json=LISTING.replace("5", "5000")), "body_json.limit"),
        (
            common_pb2.ForwardedCall(
                operation=common_pb2.FORWARDED_OPERATION_CANCEL,
                caller=common_pb2.Caller(user_id="u-1", role="operator"),
                request_id="r 1",
            ),
            "request_id",
        ),
    ]
    metadata = _peer(federation)
    with grpc.insecure_channel(f"127.0.0.1:{federation.national_port}") as channel:
        stub = national_pb2_grpc.NationalBrainServiceStub(channel)
        for call, words in wrong:
            with pytest.raises(grpc.RpcError) as refused:
                stub.Forward(
                    national_pb2.ForwardRequest(call=call, from_region="east"),
                    timeout=10,
                    metadata=metadata,
                )
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, words
            assert words in (refused.value.details() or ""), refused.value.details()
    north = federation.members["north"]
    with grpc.insecure_channel(f"127.0.0.1:{north.grpc_port}") as channel:
        regional = regional_pb2_grpc.RegionalBrainServiceStub(channel)
        with pytest.raises(grpc.RpcError) as not_its_own:
            regional.ServeForwarded(
                regional_pb2.ServeForwardedRequest(
                    call=_query(region_id="west"), from_region="east"
                ),
                timeout=10,
                metadata=metadata,
            )
        assert not_its_own.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "this is region 'north'" in (not_its_own.value.details() or "")
        nobody = regional.ServeForwarded(
            regional_pb2.ServeForwardedRequest(call=_query(region_id="north"), from_region="east"),
            timeout=10,
            metadata=metadata,
        ).answer
        assert nobody.status == 403, nobody.body_json
        assert "u-1" in json.loads(nobody.body_json)["detail"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    """A federation of the east and the west alone, on the map of four regions."""
    yield from local_federation(
        tmp_path_factory.mktemp("reads-pair"),
        regions=["east", "west"],
        database_prefix="cnbrain_fedreads2",
        shared_env={"CNBRAIN_TENANCY_INTERVAL_S": "0.5"},
    )


@pytest.mark.asyncio
@pytest.mark.slow
async def test_regions_of_the_map_that_never_registered_hold_nothing_of_the_listing(
    pair: LocalFederation,
) -> None:
    admin = _bearer(pair.admin_token)
    east = _url(pair, "east")
    assert httpx.post(f"{east}/v1/tenants", json={"id": "acme", "name": "acme"}, headers=admin)
    user = httpx.post(
        f"{east}/v1/users",
        json={"name": "ops", "role": "operator"},
        headers=admin,
    )
    assert user.status_code == 201, user.text
    made = httpx.post(f"{east}/v1/users/{user.json()['id']}/api-keys", headers=admin)
    operator = _bearer(made.json()["token"])

    async def known() -> bool | None:
        return _get(pair, "west", "/v1/requests", operator).status_code == 200 or None

    await until(known, "the operator known on the west", WITHIN_S)
    body = {"resources": {"cpu": 1, "memory_gib": 1}, "duration_hours": 1, "tenant": "acme"}
    ids = set()
    for on, province in (("east", "ZJ"), ("west", "SC"), ("east", "SC")):
        answer = httpx.post(
            f"{_url(pair, on)}/v1/requests",
            json={**body, "source_province": province},
            headers=operator,
            timeout=60,
        )
        assert answer.status_code == 201, answer.text
        ids.add(answer.json()["id"])
    for on in ("east", "west"):
        listed = _all_pages(pair, on, "/v1/requests", operator, limit=2)
        assert sorted(v["id"] for p in listed for v in p) == sorted(ids), on
        report = _get(pair, on, "/v1/usage/report", operator)
        assert report.status_code == 200, report.text
