"""Tenant isolation and roles: every endpoint, every role. Another tenant's object is a 404."""

from typing import Any

import pytest

from tests.regional.bodies import LOCAL_CPU
from tests.regional.brain_api import Api

pytestmark = pytest.mark.asyncio(loop_scope="module")

SITE_REPORT = {"cpu_cores": 1, "memory_gib": 1}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


async def world(api: Api) -> dict[str, Any]:
    a, a_admin, a_user = await api.tenant("a")
    b, b_admin, b_user = await api.tenant("b")
    operator = await api.user(role="operator", tenant=None)
    a_request = (await api.call(a_user, "POST", "/v1/requests", json=LOCAL_CPU)).json()["id"]
    b_request = (await api.call(b_user, "POST", "/v1/requests", json=LOCAL_CPU)).json()["id"]
    return {
        "a": a,
        "b": b,
        "a_admin": a_admin,
        "a_user": a_user,
        "b_admin": b_admin,
        "b_user": b_user,
        "operator": operator,
        "a_request": a_request,
        "b_request": b_request,
    }


async def test_no_cross_tenant_read_or_write(api: Api) -> None:
    w = await world(api)
    for token in (w["a_user"], w["a_admin"]):
        for method, path in (
            ("GET", f"/v1/requests/{w['b_request']}"),
            ("POST", f"/v1/requests/{w['b_request']}/cancel"),
            ("GET", f"/v1/tenants/{w['b']}"),
            ("GET", f"/v1/tenants/{w['b']}/quota"),
            ("GET", f"/v1/requests/{w['b_request']}/attempts"),
            ("GET", f"/v1/requests/{w['b_request']}/events"),
            ("POST", f"/v1/requests/{w['b_request']}/suspend"),
            ("POST", f"/v1/requests/{w['b_request']}/resume"),
            ("GET", f"/v1/usage?tenant={w['b']}"),
            ("GET", f"/v1/usage/report?tenant={w['b']}"),
        ):
            answer = await api.call(token, method, path)
            assert answer.status_code == 404, (method, path, answer.text)
        listed = (await api.call(token, "GET", "/v1/requests")).json()["items"]
        assert {item["id"] for item in listed} == {w["a_request"]}
        assert all(item["tenant"] == w["a"] for item in listed)
        own = await api.call(token, "GET", f"/v1/requests/{w['a_request']}")
        assert own.status_code == 200
    as_b = await api.call(w["a_user"], "POST", "/v1/requests", json={**LOCAL_CPU, "tenant": w["b"]})
    assert as_b.status_code == 403
    b_view = await api.call(w["b_user"], "GET", f"/v1/requests/{w['b_request']}")
    assert b_view.json()["state"] == "placed"


async def test_tenant_admin_manages_only_its_own_users(api: Api) -> None:
    w = await world(api)
    mine = await api.call(
        w["a_admin"],
        "POST",
        "/v1/users",
        json={"name": "x", "role": "tenant-user", "tenant": w["a"]},
    )
    assert mine.status_code == 201
    theirs = await api.call(
        w["a_admin"],
        "POST",
        "/v1/users",
        json={"name": "x", "role": "tenant-user", "tenant": w["b"]},
    )
    assert theirs.status_code == 403
    staff = await api.call(
        w["a_admin"], "POST", "/v1/users", json={"name": "x", "role": "operator"}
    )
    assert staff.status_code == 403
    by_user = await api.call(
        w["a_user"],
        "POST",
        "/v1/users",
        json={"name": "x", "role": "tenant-user", "tenant": w["a"]},
    )
    assert by_user.status_code == 403
    b_users_key = await api.call(w["a_admin"], "POST", f"/v1/users/{'nobody'}/api-keys")
    assert b_users_key.status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/sites", None),
        ("POST", "/v1/sites/GD-dc-1/usage", SITE_REPORT),
        ("GET", "/v1/links", None),
        ("GET", "/v1/weight-matrix", None),
        ("GET", "/v1/tenants", None),
        ("POST", "/v1/tenants", {"id": "sneaky", "name": "sneaky"}),
        ("DELETE", "/v1/sites/GD-dc-1", None),
    ],
)
async def test_operator_endpoints_refuse_tenants(
    api: Api, method: str, path: str, body: Any
) -> None:
    w = await world(api)
    for token in (w["a_user"], w["a_admin"]):
        answer = await api.call(token, method, path, json=body)
        assert answer.status_code == 403, (token, answer.text)
    if method == "GET":
        assert (await api.call(w["operator"], method, path)).status_code == 200


async def test_audit_log_is_scoped(api: Api) -> None:
    w = await world(api)
    assert (await api.call(w["a_user"], "GET", "/v1/audit")).status_code == 403
    entries = (await api.call(w["a_admin"], "GET", "/v1/audit", params={"limit": 500})).json()[
        "items"
    ]
    assert entries and all(e["tenant"] == w["a"] for e in entries)
    everything = (await api.call(w["operator"], "GET", "/v1/audit", params={"limit": 500})).json()[
        "items"
    ]
    assert {e["tenant"] for e in everything} >= {w["a"], w["b"]}


async def test_staff_see_every_tenant(api: Api) -> None:
    w = await world(api)
    for request_id in (w["a_request"], w["b_request"]):
        assert (
            await api.call(w["operator"], "GET", f"/v1/requests/{request_id}")
        ).status_code == 200


async def test_no_key_or_a_bad_key_is_401(api: Api) -> None:
    w = await world(api)
    assert (await api.client.get("/v1/requests")).status_code == 401
    forged = w["a_user"].rsplit(".", 1)[0] + ".forged"
    answer = await api.call(forged, "GET", "/v1/requests")
    assert answer.status_code == 401
    assert answer.headers["content-type"].startswith("application/problem+json")
