"""End to end on separate processes and PostgreSQL: the federation's tenancy is the national
brain's. A tenant, user and key made once, on the east's brain, submit on all four regional
brains; a key revoked on the north's answers 401 on every brain within the follow interval;
a quota set on the west holds on the east. The national brain and the regions keep only the
key's hash, and peer input is checked."""

import hashlib
import json
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from cnbrain.v1 import national_pb2, national_pb2_grpc
from tests.federation.ledgers import check_invariants, rows
from tests.federation_processes import REGIONS, LocalFederation, local_federation
from tests.polling import until

INTERVAL_S = 0.5
"""The members' tenancy follow interval (CNBRAIN_TENANCY_INTERVAL_S)."""

WITHIN_S = 20.0
"""How long the test waits for a change to hold on a brain: the interval, with room for a
busy machine."""

PROVINCE = {"east": "ZJ", "north": "BJ", "south": "GD", "west": "NX"}
"""A province of each region, where its brain places a small job itself."""


@pytest.fixture(scope="module")
def federation(tmp_path_factory: Any) -> Iterator[LocalFederation]:
    yield from local_federation(
        tmp_path_factory.mktemp("tenancy"),
        database_prefix="cnbrain_fedten",
        shared_env={"CNBRAIN_TENANCY_INTERVAL_S": str(INTERVAL_S)},
    )


def _admin(federation: LocalFederation) -> dict[str, str]:
    return {"Authorization": f"Bearer {federation.admin_token}"}


def _post(
    federation: LocalFederation, region: str, path: str, body: Any, headers: dict[str, str]
) -> httpx.Response:
    url = federation.members[region].url
    return httpx.post(f"{url}{path}", json=body, headers=headers, timeout=30)


def _job(region: str, tenant: str) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "source_province": PROVINCE[region],
        "resources": {"cpu": 1, "memory_gib": 1},
        "duration_hours": 1,
    }


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_key_made_once_works_on_every_brain_until_revoked_anywhere(
    federation: LocalFederation,
) -> None:
    admin = _admin(federation)
    made = _post(federation, "east", "/v1/tenants", {"id": "globex", "name": "Globex"}, admin)
    assert made.status_code == 201, made.text
    again = _post(federation, "north", "/v1/tenants", {"id": "globex", "name": "Again"}, admin)
    assert again.status_code == 409, again.text
    assert "exists already" in again.json()["detail"]
    user = _post(
        federation,
        "east",
        "/v1/users",
        {"name": "gina", "role": "tenant-user", "tenant": "globex"},
        admin,
    )
    assert user.status_code == 201, user.text
    key = _post(federation, "east", f"/v1/users/{user.json()['id']}/api-keys", None, admin)
    assert key.status_code == 201, key.text
    token, key_id = key.json()["token"], key.json()["id"]
    tenant_key = {"Authorization": f"Bearer {token}"}

    for region in REGIONS:

        async def submitted(region: str = region) -> dict[str, Any] | None:
            answer = _post(federation, region, "/v1/requests", _job(region, "globex"), tenant_key)
            if answer.status_code == 401:
                return None
            assert answer.status_code == 201, (region, answer.text)
            view: dict[str, Any] = answer.json()
            return view

        view = await until(submitted, f"the key made on the east submitting on {region}", WITHIN_S)
        assert view["state"] == "placed", (region, view)
        assert view["tenant"] == "globex"

    quota = httpx.put(
        f"{federation.members['west'].url}/v1/tenants/globex/quota",
        json={"accelerators": 3},
        headers=admin,
        timeout=30,
    )
    assert quota.status_code == 200, quota.text

    async def quota_on_east() -> dict[str, Any] | None:
        answer = httpx.get(
            f"{federation.members['east'].url}/v1/tenants/globex/quota", headers=tenant_key
        )
        assert answer.status_code == 200, answer.text
        view: dict[str, Any] = answer.json()
        return view if view["accelerators"] == 3 else None

    await until(quota_on_east, "the quota set on the west holding on the east", WITHIN_S)

    revoked = httpx.delete(
        f"{federation.members['north'].url}/v1/users/{user.json()['id']}/api-keys/{key_id}",
        headers=admin,
        timeout=30,
    )
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["revoked_at"] is not None
    revoked_at = time.monotonic()
    for region in REGIONS:

        async def refused(region: str = region) -> bool | None:
            answer = _post(federation, region, "/v1/requests", _job(region, "globex"), tenant_key)
            if answer.status_code == 201:
                return None
            assert answer.status_code == 401, (region, answer.text)
            return True

        await until(refused, f"the key revoked on the north refused on {region}", WITHIN_S)
    print(f"revoked on the north to refused on every brain: {time.monotonic() - revoked_at:.2f} s")

    secret = token.split(".", 1)[1]
    digest = hashlib.sha256(secret.encode()).hexdigest()
    stored_id = key_id.removeprefix("ck_")
    for name, url in federation.databases.items():
        [stored] = await rows(url, "SELECT secret_sha256 FROM api_keys WHERE id = $1", stored_id)
        assert stored["secret_sha256"] == digest, name
        log = await rows(url, "SELECT change FROM tenancy_log ORDER BY version")
        assert log, name
        assert all(secret not in json.dumps(row["change"]) for row in log), name
    national = federation.databases["national"]
    entries = await rows(
        national, "SELECT actor, action FROM audit_log WHERE object_id = $1", key_id
    )
    assert sorted(e["action"] for e in entries) == ["api_key.created", "api_key.revoked"]
    assert {e["actor"].split(":", 1)[0] for e in entries} == {"east", "north"}


def _national(federation: LocalFederation) -> Iterator[national_pb2_grpc.NationalBrainServiceStub]:
    with grpc.insecure_channel(f"127.0.0.1:{federation.national_port}") as channel:
        yield national_pb2_grpc.NationalBrainServiceStub(channel)


@pytest.mark.slow
def test_the_national_brain_checks_tenancy_calls(federation: LocalFederation) -> None:
    token = federation.members["national"].env["CNBRAIN_PEER_TOKEN"]
    metadata = (("authorization", f"Bearer {token}"),)
    tenant = {"kind": "tenant.created", "tenant_id": "initech", "name": "Initech"}
    key = {
        "kind": "api_key.created",
        "key_id": "0123456789abcdef",
        "user_id": "u-nobody",
        "secret_sha256": "0" * 64,
    }
    wrong: list[tuple[Any, grpc.StatusCode, str]] = [
        (
            national_pb2.ChangeTenancyRequest(change_json="{", region_id="east"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "change_json",
        ),
        (
            national_pb2.ChangeTenancyRequest(
                change_json=json.dumps({**tenant, "tenant_id": "no spaces"}), region_id="east"
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "tenant_id",
        ),
        (
            national_pb2.ChangeTenancyRequest(
                change_json=json.dumps({**key, "secret_sha256": "a secret"}), region_id="east"
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "secret_sha256",
        ),
        (
            national_pb2.ChangeTenancyRequest(
                change_json=json.dumps({**tenant, "name": "x" * 5000}), region_id="east"
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "at most 4096",
        ),
        (
            national_pb2.ChangeTenancyRequest(change_json=json.dumps(tenant), region_id="moon"),
            grpc.StatusCode.UNAVAILABLE,
            "has not registered",
        ),
        (
            national_pb2.ChangeTenancyRequest(change_json=json.dumps(key), region_id="east"),
            grpc.StatusCode.NOT_FOUND,
            "u-nobody",
        ),
    ]
    for stub in _national(federation):
        for call, code, words in wrong:
            with pytest.raises(grpc.RpcError) as refused:
                stub.ChangeTenancy(call, timeout=10, metadata=metadata)
            assert refused.value.code() == code, refused.value.details()
            assert words in (refused.value.details() or ""), refused.value.details()
        for since, most in [(-1, 10), (0, 5000), (0, -1)]:
            with pytest.raises(grpc.RpcError) as refused:
                stub.GetTenancy(
                    national_pb2.GetTenancyRequest(since_version=since, max_changes=most),
                    timeout=10,
                    metadata=metadata,
                )
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        page = stub.GetTenancy(
            national_pb2.GetTenancyRequest(since_version=0, max_changes=1),
            timeout=10,
            metadata=metadata,
        )
        assert len(page.changes) <= 1
        assert page.latest_version >= len(page.changes)
        for tenant_id, code in [
            ("no spaces", grpc.StatusCode.INVALID_ARGUMENT),
            ("nobody-at-all", grpc.StatusCode.NOT_FOUND),
        ]:
            with pytest.raises(grpc.RpcError) as refused:
                stub.GetNationalQuotaUse(
                    national_pb2.GetNationalQuotaUseRequest(tenant_id=tenant_id),
                    timeout=10,
                    metadata=metadata,
                )
            assert refused.value.code() == code, refused.value.details()


@pytest.mark.slow
def test_without_the_national_brain_keys_still_work_and_changes_are_refused(
    federation: LocalFederation,
) -> None:
    admin = _admin(federation)
    made = _post(federation, "south", "/v1/tenants", {"id": "umbrella", "name": "U"}, admin)
    assert made.status_code == 201, made.text
    user = _post(
        federation,
        "south",
        "/v1/users",
        {"name": "uma", "role": "tenant-user", "tenant": "umbrella"},
        admin,
    ).json()
    key = _post(federation, "south", f"/v1/users/{user['id']}/api-keys", None, admin).json()
    tenant_key = {"Authorization": f"Bearer {key['token']}"}
    federation.kill("national")
    try:
        answer = _post(federation, "south", "/v1/requests", _job("south", "umbrella"), tenant_key)
        assert answer.status_code == 201, answer.text
        assert answer.json()["state"] == "placed"
        refused = _post(federation, "south", "/v1/tenants", {"id": "hooli", "name": "H"}, admin)
        assert refused.status_code == 503, refused.text
        revoke = httpx.delete(
            f"{federation.members['south'].url}/v1/users/{user['id']}/api-keys/{key['id']}",
            headers=admin,
            timeout=30,
        )
        assert revoke.status_code == 503, revoke.text
        missing = httpx.get(f"{federation.members['south'].url}/v1/tenants/hooli", headers=admin)
        assert missing.status_code == 404, missing.text
        still = _post(federation, "south", "/v1/requests", _job("south", "umbrella"), tenant_key)
        assert still.status_code == 201, still.text
    finally:
        federation.start_member("national")
        federation.wait_registered()


def _put(
    federation: LocalFederation, region: str, path: str, body: Any, headers: dict[str, str]
) -> httpx.Response:
    url = federation.members[region].url
    return httpx.put(f"{url}{path}", json=body, headers=headers, timeout=30)


def _quota_on(federation: LocalFederation, region: str, tenant: str) -> dict[str, Any] | None:
    """The tenant's quota view on `region`'s brain, as its admin; None while that brain has
    not followed the tenant's creation yet (404)."""
    answer = httpx.get(
        f"{federation.members[region].url}/v1/tenants/{tenant}/quota",
        headers=_admin(federation),
        timeout=30,
    )
    if answer.status_code == 404:
        return None
    assert answer.status_code == 200, (region, answer.text)
    view: dict[str, Any] = answer.json()
    return view


def _submit_as_staff(federation: LocalFederation, region: str, tenant: str) -> dict[str, Any]:
    answer = _post(federation, region, "/v1/requests", _job(region, tenant), _admin(federation))
    assert answer.status_code == 201, (region, answer.text)
    view: dict[str, Any] = answer.json()
    return view


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_national_quota_holds_on_the_sum_over_every_region(
    federation: LocalFederation,
) -> None:
    admin = _admin(federation)
    made = _post(federation, "east", "/v1/tenants", {"id": "initrode", "name": "Initrode"}, admin)
    assert made.status_code == 201, made.text
    national = _put(
        federation, "north", "/v1/tenants/initrode/national-quota", {"cpu_cores": 3}, admin
    )
    assert national.status_code == 200, national.text
    assert national.json()["national"]["cpu_cores"] == 3
    assert national.json()["cpu_cores"] is None
    assert national.json()["region"] == "north"

    for region in REGIONS:

        async def limited_on(region: str = region) -> bool | None:
            view = _quota_on(federation, region, "initrode")
            if view is None:
                return None
            return True if view["national"] and view["national"]["cpu_cores"] == 3 else None

        await until(limited_on, f"the national quota on {region}", WITHIN_S)

    placed = [
        _submit_as_staff(federation, region, "initrode") for region in ("east", "north", "south")
    ]
    assert [view["state"] for view in placed] == ["placed"] * 3, placed
    refused = _submit_as_staff(federation, "west", "initrode")
    assert refused["state"] == "rejected", refused
    assert "'national'" in refused["reason"] and "initrode" in refused["reason"], refused
    [used] = await rows(
        federation.databases["national"],
        "SELECT limit_cpu_m, used_cpu_m, active_requests FROM quotas WHERE tenant_id = $1",
        "initrode",
    )
    assert dict(used) == {"limit_cpu_m": 3000, "used_cpu_m": 3000, "active_requests": 3}
    view = httpx.get(
        f"{federation.members['west'].url}/v1/tenants/initrode/national-quota", headers=admin
    )
    assert view.status_code == 200, view.text
    assert view.json()["cpu_cores"] == 3 and view.json()["used_cpu_cores"] == 3, view.json()
    assert view.json()["used_active_requests"] == 3

    cancelled = httpx.post(
        f"{federation.members['north'].url}/v1/requests/{placed[1]['id']}/cancel",
        headers=admin,
        timeout=30,
    )
    assert cancelled.status_code == 200, cancelled.text
    again = _submit_as_staff(federation, "west", "initrode")
    assert again["state"] == "placed", again
    [used] = await rows(
        federation.databases["national"],
        "SELECT used_cpu_m FROM quotas WHERE tenant_id = $1",
        "initrode",
    )
    assert used["used_cpu_m"] == 3000
    for url in federation.databases.values():
        await check_invariants(url)


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_region_may_hold_a_tenant_to_limits_of_its_own(
    federation: LocalFederation,
) -> None:
    admin = _admin(federation)
    made = _post(federation, "south", "/v1/tenants", {"id": "wonka", "name": "Wonka"}, admin)
    assert made.status_code == 201, made.text
    unknown = _put(federation, "south", "/v1/tenants/wonka/quota?region=atlantis", {}, admin)
    assert unknown.status_code == 404, unknown.text
    assert "atlantis" in unknown.json()["detail"]
    malformed = _put(federation, "south", "/v1/tenants/wonka/quota?region=a%20b", {}, admin)
    assert malformed.status_code == 422, malformed.text
    assert "region" in malformed.text

    everywhere = _put(federation, "south", "/v1/tenants/wonka/quota", {"cpu_cores": 8}, admin)
    assert everywhere.status_code == 200, everywhere.text
    west = _put(federation, "south", "/v1/tenants/wonka/quota?region=west", {"cpu_cores": 0}, admin)
    assert west.status_code == 200, west.text
    assert west.json()["cpu_cores"] == 8, "the south's own limits are unchanged"

    async def cpu_on(region: str, cores: float) -> bool | None:
        view = _quota_on(federation, region, "wonka")
        if view is None:
            return None
        return True if view["cpu_cores"] == cores and view["region"] == region else None

    await until(lambda: cpu_on("west", 0), "the west's own limit", WITHIN_S)
    await until(lambda: cpu_on("east", 8), "the limit of every other region", WITHIN_S)
    refused = _submit_as_staff(federation, "west", "wonka")
    assert refused["state"] == "rejected", refused
    assert "cpu" in refused["reason"], refused
    assert _submit_as_staff(federation, "east", "wonka")["state"] == "placed"

    reset = _put(federation, "north", "/v1/tenants/wonka/quota", {"cpu_cores": 4}, admin)
    assert reset.status_code == 200, reset.text
    await until(lambda: cpu_on("west", 4), "a set for every region replacing the west's", WITHIN_S)
    assert _submit_as_staff(federation, "west", "wonka")["state"] == "placed"
