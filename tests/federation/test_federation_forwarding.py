"""End to end on separate processes and PostgreSQL: any brain takes any request. A tenant
made once submits the README's GPU job with a source province of the north on the east's
brain: the east forwards it through the national brain, and it is placed as the north
places it, and lives there; the request and its events read on the east and on the north
are the same; a retry with the same Idempotency-Key gets the first answer; another tenant
reads nothing of it; a province no region owns is refused naming the field; a group of a
southern province sent to the east is placed by the south, and one whose members come from
two regions is refused naming the member; peer input is checked; an owner that does not
answer makes the submission 503 naming it."""

import json
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from cnbrain.v1 import common_pb2, national_pb2, national_pb2_grpc, regional_pb2, regional_pb2_grpc
from tests.federation.member_requests import GPU_REQUEST
from tests.federation_processes import LocalFederation, local_federation
from tests.polling import until

INTERVAL_S = 0.5
"""The members' tenancy follow interval (CNBRAIN_TENANCY_INTERVAL_S)."""

WITHIN_S = 20.0

NORTH = "BJ"
"""A province of the north."""


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from local_federation(
        tmp_path_factory.mktemp("forwarding"),
        database_prefix="cnbrain_fedfwd",
        shared_env={"CNBRAIN_TENANCY_INTERVAL_S": str(INTERVAL_S)},
    )


def _url(federation: LocalFederation, region: str) -> str:
    return federation.members[region].url


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _tenant_key(federation: LocalFederation, tenant: str, on: str) -> dict[str, str]:
    """A key of a new user of new tenant `tenant`, all made on region `on`'s brain."""
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
    key = httpx.post(f"{url}/v1/users/{user.json()['id']}/api-keys", headers=admin)
    assert key.status_code == 201, key.text
    return _bearer(key.json()["token"])


async def _on_every_brain(federation: LocalFederation, key: dict[str, str]) -> None:
    """Wait until `key` authenticates on every regional brain."""
    for region in ("east", "north", "south", "west"):

        async def known(region: str = region) -> bool | None:
            answer = httpx.get(f"{_url(federation, region)}/v1/requests", headers=key)
            return None if answer.status_code == 401 else True

        await until(known, f"the key working on {region}", WITHIN_S)


def _gpu_job(province: str) -> dict[str, Any]:
    return {**{k: v for k, v in GPU_REQUEST.items() if k != "id"}, "source_province": province}


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_request_of_a_northern_province_sent_to_the_east_is_placed_as_on_the_north(
    federation: LocalFederation,
) -> None:
    key = _tenant_key(federation, "hooli", on="west")
    await _on_every_brain(federation, key)
    east, north = _url(federation, "east"), _url(federation, "north")

    on_north = httpx.post(f"{north}/v1/requests", json=_gpu_job(NORTH), headers=key, timeout=60)
    assert on_north.status_code == 201, on_north.text
    assert on_north.json()["state"] == "placed", on_north.text
    site = on_north.json()["site"]
    cancelled = httpx.post(
        f"{north}/v1/requests/{on_north.json()['id']}/cancel", headers=key, timeout=60
    )
    assert cancelled.status_code == 200, cancelled.text

    quoted = httpx.post(f"{east}/v1/quotes", json=_gpu_job(NORTH), headers=key, timeout=60)
    assert quoted.status_code == 200, quoted.text
    assert quoted.json()["decision"]["site"] == site

    retry = {**key, "Idempotency-Key": "gpu-from-bj"}
    on_east = httpx.post(f"{east}/v1/requests", json=_gpu_job(NORTH), headers=retry, timeout=60)
    assert on_east.status_code == 201, on_east.text
    view = on_east.json()
    assert view["state"] == "placed", view
    assert view["site"] == site
    assert view["tenant"] == "hooli"
    assert on_east.headers["location"] == f"/v1/requests/{view['id']}"
    request_id = view["id"]

    again = httpx.post(f"{east}/v1/requests", json=_gpu_job(NORTH), headers=retry, timeout=60)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == request_id
    other = httpx.post(
        f"{east}/v1/requests",
        json={**_gpu_job(NORTH), "duration_hours": 1},
        headers=retry,
        timeout=60,
    )
    assert other.status_code == 422, other.text
    assert "Idempotency-Key" in other.text

    read_east = httpx.get(f"{east}/v1/requests/{request_id}", headers=key, timeout=30)
    read_north = httpx.get(f"{north}/v1/requests/{request_id}", headers=key, timeout=30)
    assert read_east.status_code == read_north.status_code == 200, (read_east.text, read_north.text)
    for field in ("id", "tenant", "site", "request", "decision", "created_at"):
        assert read_east.json()[field] == read_north.json()[field], field
    assert read_east.json()["site"] == site
    events_east = httpx.get(f"{east}/v1/requests/{request_id}/events", headers=key, timeout=30)
    events_north = httpx.get(f"{north}/v1/requests/{request_id}/events", headers=key, timeout=30)
    assert events_east.status_code == events_north.status_code == 200, events_east.text
    seen = events_east.json()["events"]
    assert seen == events_north.json()["events"][: len(seen)], "the same events, as they came"
    assert {"submitted", "placed"} <= {e["kind"] for e in events_east.json()["events"]}

    stranger = _tenant_key(federation, "initrode", on="south")
    await _on_every_brain(federation, stranger)
    for path in (f"/v1/requests/{request_id}", f"/v1/requests/{request_id}/events"):
        hidden = httpx.get(f"{east}{path}", headers=stranger, timeout=30)
        assert hidden.status_code == 404, hidden.text
    missing = httpx.get(f"{east}/v1/requests/req-0000000000000000", headers=key, timeout=30)
    assert missing.status_code == 404, missing.text

    unknown = httpx.post(f"{east}/v1/requests", json=_gpu_job("XX"), headers=key, timeout=30)
    assert unknown.status_code == 422, unknown.text
    assert unknown.json()["errors"][0]["field"] == "source_province"

    cancel = httpx.post(f"{north}/v1/requests/{request_id}/cancel", headers=key, timeout=60)
    assert cancel.status_code == 200, cancel.text


SOUTH_T4 = {
    "source_province": "GD",
    "resources": {"cpu": 4, "memory_gib": 16, "accelerator": {"model": "T4", "count": 1}},
    "constraints": {"max_latency_ms": 20},
    "duration_hours": 1,
    "workload_class": "inference",
}
"""A replica of a service in Guangdong, a province of the south."""


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_group_of_a_southern_province_sent_to_the_east_is_placed_by_the_south(
    federation: LocalFederation,
) -> None:
    key = _tenant_key(federation, "globex", on="north")
    await _on_every_brain(federation, key)
    east, south = _url(federation, "east"), _url(federation, "south")
    group = {"id": "chat", "placement": "spread", "requests": [SOUTH_T4] * 3}
    made = httpx.post(f"{east}/v1/request-groups", json=group, headers=key, timeout=60)
    assert made.status_code == 201, made.text
    view = made.json()
    assert (view["id"], view["state"]) == ("chat", "placed"), view
    sites = [member["site"] for member in view["requests"]]
    assert len(set(sites)) == 3 and all(site.startswith("GD-") for site in sites), sites
    for member in view["requests"]:
        held = httpx.get(f"{south}/v1/requests/{member['id']}", headers=key, timeout=30)
        assert held.status_code == 200, held.text
        assert (held.json()["state"], held.json()["site"]) == ("placed", member["site"])

    mixed = {**group, "requests": [SOUTH_T4, {**SOUTH_T4, "source_province": NORTH}]}
    refused = httpx.post(f"{east}/v1/request-groups", json=mixed, headers=key, timeout=60)
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["field"] == "requests.1.source_province", refused.text
    assert "region 'north'" in refused.json()["detail"], refused.text

    for member in view["requests"]:
        cancel = httpx.post(f"{east}/v1/requests/{member['id']}/cancel", headers=key, timeout=60)
        assert cancel.status_code == 200, cancel.text


def _peer(federation: LocalFederation) -> tuple[tuple[str, str]]:
    token = federation.members["national"].env["CNBRAIN_PEER_TOKEN"]
    return (("authorization", f"Bearer {token}"),)


def _call(**fields: Any) -> common_pb2.ForwardedCall:
    caller = fields.pop("caller", {"user_id": "u-1", "role": "tenant-user", "tenant_id": "t"})
    return common_pb2.ForwardedCall(caller=common_pb2.Caller(**caller), **fields)


@pytest.mark.slow
def test_forwarded_calls_are_checked_by_the_national_brain_and_the_owner(
    federation: LocalFederation,
) -> None:
    body = json.dumps(_gpu_job(NORTH))
    wrong: list[tuple[common_pb2.ForwardedCall, str, str]] = [
        (_call(operation=common_pb2.FORWARDED_OPERATION_UNSPECIFIED), "east", "operation"),
        (
            _call(operation=common_pb2.FORWARDED_OPERATION_GET, request_id="no spaces"),
            "east",
            "request_id",
        ),
        (
            _call(
                operation=common_pb2.FORWARDED_OPERATION_GET,
                request_id="req-1",
                caller={"user_id": "u-1", "role": "root", "tenant_id": "t"},
            ),
            "east",
            "caller.role",
        ),
        (
            _call(operation=common_pb2.FORWARDED_OPERATION_SUBMIT, body_json="x" * (1 << 21)),
            "east",
            "at most",
        ),
        (
            _call(
                operation=common_pb2.FORWARDED_OPERATION_SUBMIT,
                body_json=body,
                idempotency_key="k" * 201,
            ),
            "east",
            "idempotency_key",
        ),
        (
            _call(operation=common_pb2.FORWARDED_OPERATION_SUBMIT, body_json="[1]"),
            "east",
            "JSON object",
        ),
        (
            _call(
                operation=common_pb2.FORWARDED_OPERATION_SUBMIT,
                body_json=json.dumps(_gpu_job("XX")),
            ),
            "east",
            "no region owns",
        ),
        (_call(operation=common_pb2.FORWARDED_OPERATION_SUBMIT, body_json=body), "north", "own"),
        (
            _call(
                operation=common_pb2.FORWARDED_OPERATION_SUBMIT_GROUP,
                body_json=json.dumps({"requests": [SOUTH_T4, _gpu_job(NORTH)]}),
            ),
            "east",
            "a group's members come from one region",
        ),
    ]
    metadata = _peer(federation)
    with grpc.insecure_channel(f"127.0.0.1:{federation.national_port}") as channel:
        stub = national_pb2_grpc.NationalBrainServiceStub(channel)
        for call, region, words in wrong:
            with pytest.raises(grpc.RpcError) as refused:
                stub.Forward(
                    national_pb2.ForwardRequest(call=call, from_region=region),
                    timeout=10,
                    metadata=metadata,
                )
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, words
            assert words in (refused.value.details() or ""), refused.value.details()
        with pytest.raises(grpc.RpcError) as unregistered:
            stub.Forward(
                national_pb2.ForwardRequest(
                    call=_call(operation=common_pb2.FORWARDED_OPERATION_SUBMIT, body_json=body),
                    from_region="moon",
                ),
                timeout=10,
                metadata=metadata,
            )
        assert unregistered.value.code() == grpc.StatusCode.UNAVAILABLE

    east = federation.members["east"]
    with grpc.insecure_channel(f"127.0.0.1:{east.grpc_port}") as channel:
        regional = regional_pb2_grpc.RegionalBrainServiceStub(channel)
        with pytest.raises(grpc.RpcError) as not_its_own:
            regional.ServeForwarded(
                regional_pb2.ServeForwardedRequest(
                    call=_call(operation=common_pb2.FORWARDED_OPERATION_SUBMIT, body_json=body),
                    from_region="west",
                ),
                timeout=10,
                metadata=metadata,
            )
        assert not_its_own.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "is not in region 'east'" in (not_its_own.value.details() or "")
        nobody = regional.ServeForwarded(
            regional_pb2.ServeForwardedRequest(
                call=_call(
                    operation=common_pb2.FORWARDED_OPERATION_SUBMIT,
                    body_json=json.dumps(_gpu_job("ZJ")),
                    caller={"user_id": "u-nobody", "role": "admin", "tenant_id": ""},
                ),
                from_region="west",
            ),
            timeout=10,
            metadata=metadata,
        ).answer
        assert nobody.status == 403, nobody.body_json
        assert nobody.content_type == "application/problem+json"
        assert "u-nobody" in json.loads(nobody.body_json)["detail"]


@pytest.mark.asyncio
@pytest.mark.slow
async def test_an_owner_or_national_brain_down_makes_the_forwarded_call_503_naming_it(
    federation: LocalFederation,
) -> None:
    key = _tenant_key(federation, "vandelay", on="east")
    await _on_every_brain(federation, key)
    east = _url(federation, "east")
    small = {
        "source_province": NORTH,
        "resources": {"cpu": 1, "memory_gib": 1},
        "duration_hours": 1,
    }
    placed = httpx.post(f"{east}/v1/requests", json=small, headers=key, timeout=60)
    assert placed.status_code == 201, placed.text
    request_id = placed.json()["id"]
    federation.kill("north")
    try:
        down = httpx.post(f"{east}/v1/requests", json=small, headers=key, timeout=60)
        assert down.status_code == 503, down.text
        assert "region 'north'" in down.json()["detail"], down.text
        assert down.headers["retry-after"]
        unread = httpx.get(f"{east}/v1/requests/{request_id}", headers=key, timeout=60)
        assert unread.status_code == 503, unread.text
        assert "'north'" in unread.json()["detail"], unread.text
        local = httpx.post(
            f"{east}/v1/requests", json={**small, "source_province": "ZJ"}, headers=key
        )
        assert local.status_code == 201, local.text
    finally:
        federation.start_member("north")
        federation.wait_registered()
    federation.kill("national")
    try:
        down = httpx.post(f"{east}/v1/requests", json=small, headers=key, timeout=60)
        assert down.status_code == 503, down.text
        assert "the national brain" in down.json()["detail"], down.text
    finally:
        federation.start_member("national")
        federation.wait_registered()
