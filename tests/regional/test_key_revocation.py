"""Revoking API keys and disabling users: who may, and that the keys stop working."""

from dataclasses import dataclass

import pytest

from tests.regional.brain_api import Api

pytestmark = pytest.mark.asyncio(loop_scope="module")


@dataclass(frozen=True)
class Member:
    user_id: str
    key_id: str
    token: str


async def member(api: Api, *, role: str, tenant: str | None) -> Member:
    """A new user of `role` (in `tenant`) with one key, made by the admin."""
    made = await api.as_admin(
        "POST", "/v1/users", json={"name": role, "role": role, "tenant": tenant}
    )
    assert made.status_code == 201, made.text
    key = (await api.as_admin("POST", f"/v1/users/{made.json()['id']}/api-keys")).json()
    return Member(user_id=made.json()["id"], key_id=key["id"], token=key["token"])


async def works(api: Api, token: str) -> bool:
    answer = await api.call(token, "GET", "/v1/requests")
    assert answer.status_code in (200, 401), answer.text
    return answer.status_code == 200


async def test_a_revoked_key_answers_401_at_once(api: Api) -> None:
    tenant = await api.new_tenant("rv")
    admin = await member(api, role="tenant-admin", tenant=tenant)
    user = await member(api, role="tenant-user", tenant=tenant)
    spare = (await api.as_admin("POST", f"/v1/users/{user.user_id}/api-keys")).json()
    assert await works(api, user.token)  # verified, so cached now
    revoked = await api.call(
        admin.token, "DELETE", f"/v1/users/{user.user_id}/api-keys/{user.key_id}"
    )
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["id"] == user.key_id and revoked.json()["revoked_at"]
    assert not await works(api, user.token)
    assert await works(api, spare["token"])
    listed = (await api.call(admin.token, "GET", f"/v1/users/{user.user_id}/api-keys")).json()
    assert {k["id"]: k["revoked_at"] is not None for k in listed} == {
        user.key_id: True,
        spare["id"]: False,
    }
    assert "token" not in listed[0] and "secret_sha256" not in listed[0]
    again = await api.call(
        admin.token, "DELETE", f"/v1/users/{user.user_id}/api-keys/{user.key_id}"
    )
    assert again.status_code == 200 and again.json()["revoked_at"] == revoked.json()["revoked_at"]
    audit = await api.call(admin.token, "GET", "/v1/audit", params={"object_type": "api_key"})
    assert any(
        e["action"] == "api_key.revoked" and e["object_id"] == user.key_id
        for e in audit.json()["items"]
    )


async def test_a_disabled_users_keys_all_answer_401(api: Api) -> None:
    tenant = await api.new_tenant("rv")
    admin = await member(api, role="tenant-admin", tenant=tenant)
    user = await member(api, role="tenant-user", tenant=tenant)
    second = (await api.as_admin("POST", f"/v1/users/{user.user_id}/api-keys")).json()["token"]
    assert await works(api, user.token) and await works(api, second)
    disabled = await api.call(admin.token, "POST", f"/v1/users/{user.user_id}/disable")
    assert disabled.status_code == 200, disabled.text
    assert disabled.json()["id"] == user.user_id and disabled.json()["disabled_at"]
    assert not await works(api, user.token) and not await works(api, second)
    assert await works(api, admin.token)
    fresh_key = await api.as_admin("POST", f"/v1/users/{user.user_id}/api-keys")
    assert fresh_key.status_code == 409, fresh_key.text
    audit = await api.call(admin.token, "GET", "/v1/audit", params={"object_type": "user"})
    assert any(
        e["action"] == "user.disabled" and e["object_id"] == user.user_id
        for e in audit.json()["items"]
    )


async def test_a_tenant_admin_manages_only_its_own_tenants_users(api: Api) -> None:
    mine, theirs = await api.new_tenant("rv"), await api.new_tenant("rv")
    admin = await member(api, role="tenant-admin", tenant=mine)
    other = await member(api, role="tenant-user", tenant=theirs)
    operator = await member(api, role="operator", tenant=None)
    for target in (other, operator):
        for method, path in (
            ("GET", f"/v1/users/{target.user_id}/api-keys"),
            ("DELETE", f"/v1/users/{target.user_id}/api-keys/{target.key_id}"),
            ("POST", f"/v1/users/{target.user_id}/disable"),
        ):
            answer = await api.call(admin.token, method, path)
            assert answer.status_code == 404, (method, path, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
    assert await works(api, other.token) and await works(api, operator.token)
    # a key of a user of its own tenant named under another user: not found either
    colleague = await member(api, role="tenant-user", tenant=mine)
    misnamed = await api.call(
        admin.token, "DELETE", f"/v1/users/{colleague.user_id}/api-keys/{admin.key_id}"
    )
    assert misnamed.status_code == 404 and await works(api, admin.token)


async def test_a_tenant_user_may_revoke_and_disable_nobody(api: Api) -> None:
    tenant = await api.new_tenant("rv")
    user = await member(api, role="tenant-user", tenant=tenant)
    colleague = await member(api, role="tenant-user", tenant=tenant)
    for target in (user, colleague):
        for method, path in (
            ("GET", f"/v1/users/{target.user_id}/api-keys"),
            ("DELETE", f"/v1/users/{target.user_id}/api-keys/{target.key_id}"),
            ("POST", f"/v1/users/{target.user_id}/disable"),
        ):
            answer = await api.call(user.token, method, path)
            assert answer.status_code == 403, (method, path, answer.text)
    assert await works(api, user.token) and await works(api, colleague.token)


async def test_an_operator_manages_tenant_users_but_not_admins(api: Api) -> None:
    tenant = await api.new_tenant("rv")
    operator = await member(api, role="operator", tenant=None)
    user = await member(api, role="tenant-user", tenant=tenant)
    admin = await member(api, role="admin", tenant=None)
    assert (
        await api.call(operator.token, "POST", f"/v1/users/{admin.user_id}/disable")
    ).status_code == 403
    assert await works(api, admin.token)
    assert (
        await api.call(operator.token, "POST", f"/v1/users/{user.user_id}/disable")
    ).status_code == 200
    assert not await works(api, user.token)


async def test_unknown_users_and_keys_answer_404(api: Api) -> None:
    tenant = await api.new_tenant("rv")
    user = await member(api, role="tenant-user", tenant=tenant)
    for method, path in (
        ("POST", "/v1/users/u-nobody/disable"),
        ("GET", "/v1/users/u-nobody/api-keys"),
        ("DELETE", f"/v1/users/{user.user_id}/api-keys/ck_ffffffffffffffff"),
        ("DELETE", f"/v1/users/{user.user_id}/api-keys/{user.key_id.removeprefix('ck_')}"),
    ):
        answer = await api.as_admin(method, path)
        assert answer.status_code == 404, (method, path, answer.text)
    assert await works(api, user.token)
