"""The priority classes over REST on PostgreSQL and Redis: the built-ins, who may change them,
validation naming the field, the set's rules as 409, and requests naming a class.

The brain is shared by the module's tests, so each test makes classes of its own names and
values and leaves the built-in ones as they are.
"""

from typing import Any

import httpx
import pytest

from tests.regional.bodies import LOCAL_CPU
from tests.regional.brain_api import Api, detail_of

pytestmark = pytest.mark.asyncio(loop_scope="module")

CLASSES = "/v1/priority-classes"
BUILT_IN = [
    {"name": "high", "value": 900, "preemptible": False, "default_max_wait_s": 3600.0},
    {"name": "normal", "value": 500, "preemptible": True, "default_max_wait_s": 86400.0},
    {"name": "low", "value": 100, "preemptible": True, "default_max_wait_s": 86400.0},
]


def _body(value: int, **extra: Any) -> dict[str, Any]:
    return {"value": value, "preemptible": True, "default_max_wait_s": 600, **extra}


async def test_anyone_authenticated_reads_the_built_in_classes(api: Api) -> None:
    _, user = await api.tenant_user("pc-read")
    listed = await api.call(user, "GET", CLASSES)
    assert listed.status_code == 200, listed.text
    built_in = [one for one in listed.json() if one["name"] in ("high", "normal", "low")]
    assert built_in == [{**one, "default": one["name"] == "normal"} for one in BUILT_IN]
    values = [one["value"] for one in listed.json()]
    assert values == sorted(values, reverse=True)
    one = await api.call(user, "GET", f"{CLASSES}/high")
    assert one.json() == {**BUILT_IN[0], "default": False}
    assert "'nope' does not exist" in detail_of(await api.call(user, "GET", f"{CLASSES}/nope"), 404)
    detail_of(await api.client.get(CLASSES), 401)


async def test_only_staff_put_and_delete(api: Api) -> None:
    _, admin, user = await api.tenant("pc-roles")
    operator = await api.user(role="operator", tenant=None)
    for token in (user, admin):
        detail_of(await api.call(token, "PUT", f"{CLASSES}/mine", json=_body(7001)), 403)
        detail_of(await api.call(token, "DELETE", f"{CLASSES}/low"), 403)
    made = await api.call(operator, "PUT", f"{CLASSES}/ops-batch", json=_body(7002))
    assert made.status_code == 201, made.text
    assert made.json() == {
        "name": "ops-batch",
        "value": 7002,
        "preemptible": True,
        "default_max_wait_s": 600.0,
        "default": False,
    }
    gone = await api.call(operator, "DELETE", f"{CLASSES}/ops-batch")
    assert gone.status_code == 204, gone.text
    detail_of(await api.call(user, "GET", f"{CLASSES}/ops-batch"), 404)


async def test_put_creates_then_replaces_and_is_audited(api: Api) -> None:
    made = await api.as_admin("PUT", f"{CLASSES}/batch.nightly", json=_body(7101))
    assert made.status_code == 201, made.text
    replaced = await api.as_admin(
        "PUT", f"{CLASSES}/batch.nightly", json=_body(7102, preemptible=False)
    )
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["value"] == 7102 and replaced.json()["preemptible"] is False
    shown = await api.as_admin("GET", f"{CLASSES}/batch.nightly")
    assert shown.json() == replaced.json()
    deleted = await api.as_admin("DELETE", f"{CLASSES}/batch.nightly")
    assert deleted.status_code == 204, deleted.text
    audit = await api.as_admin("GET", "/v1/audit", params={"object_type": "priority_class"})
    actions = [
        e["action"] for e in reversed(audit.json()["items"]) if e["object_id"] == "batch.nightly"
    ]
    assert actions == [
        "priority_class.created",
        "priority_class.replaced",
        "priority_class.deleted",
    ]


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("has space", _body(7201), "name"),
        ("-dash-first", _body(7202), "name"),
        ("x" * 64, _body(7203), "name"),
        ("ok-name", _body(10**9 + 1), "value"),
        ("ok-name", _body(-(10**9) - 1), "value"),
        ("ok-name", {**_body(7209), "value": 1.5}, "value"),
        ("ok-name", {**_body(7204), "preemptible": "yes"}, "preemptible"),
        ("ok-name", {**_body(7205), "default_max_wait_s": -1}, "default_max_wait_s"),
        ("ok-name", {**_body(7206), "default_max_wait_s": 10**5 * 3600 + 1}, "default_max_wait_s"),
        ("ok-name", {**_body(7207), "default": 1}, "default"),
        ("ok-name", {**_body(7208), "colour": "red"}, "colour"),
        ("ok-name", {"preemptible": True, "default_max_wait_s": 0}, "value"),
    ],
)
async def test_bad_names_and_numbers_are_422_naming_the_field(
    api: Api, name: str, body: dict[str, Any], field: str
) -> None:
    detail_of(await api.as_admin("PUT", f"{CLASSES}/{name}", json=body), 422, field)
    detail_of(await api.as_admin("GET", f"{CLASSES}/{name}"), 404)


async def test_the_rules_of_the_set_answer_409(api: Api) -> None:
    taken = await api.as_admin("PUT", f"{CLASSES}/copycat", json=_body(900))
    assert "value: 900 is already the value of class 'high'" in detail_of(taken, 409)
    undefault = await api.as_admin("PUT", f"{CLASSES}/normal", json=_body(500))
    assert "'normal' is the default" in detail_of(undefault, 409)
    assert "'normal' is the default" in detail_of(
        await api.as_admin("DELETE", f"{CLASSES}/normal"), 409
    )
    detail_of(await api.as_admin("DELETE", f"{CLASSES}/copycat"), 404)
    # The default moves to a new class, and back.
    made = await api.as_admin("PUT", f"{CLASSES}/standard", json=_body(7301, default=True))
    assert made.status_code == 201 and made.json()["default"] is True, made.text
    assert await _defaults(api) == ["standard"]
    back = {"value": 500, "preemptible": True, "default_max_wait_s": 86400, "default": True}
    assert (await api.as_admin("PUT", f"{CLASSES}/normal", json=back)).status_code == 200
    assert (await api.as_admin("DELETE", f"{CLASSES}/standard")).status_code == 204
    assert await _defaults(api) == ["normal"]


async def _defaults(api: Api) -> list[str]:
    return [one["name"] for one in (await api.as_admin("GET", CLASSES)).json() if one["default"]]


async def test_requests_name_existing_classes_and_a_start_now_or_queue(api: Api) -> None:
    _, user = await api.tenant_user("pc-requests")
    made = await api.as_admin("PUT", f"{CLASSES}/research", json=_body(7401))
    assert made.status_code == 201, made.text
    unknown = await _submit(api, user, priority_class="vip")
    assert "unknown class 'vip'" in detail_of(unknown, 422, "priority_class")
    quoted = await api.call(user, "POST", "/v1/quotes", json={**LOCAL_CPU, "start": "queue"})
    assert quoted.status_code == 200, quoted.text
    detail_of(await _submit(api, user, start="later"), 422, "start")
    for wait in (-1, 10**5 * 3600 + 1, "1h"):
        detail_of(await _submit(api, user, max_wait_s=wait), 422, "max_wait_s")
    asked = {**LOCAL_CPU, "priority_class": "research", "max_wait_s": 120, "start": "now"}
    placed = await api.call(user, "POST", "/v1/requests", json=asked)
    assert placed.status_code == 201, placed.text
    view = placed.json()
    assert view["state"] == "placed"
    assert {k: view["request"][k] for k in ("priority_class", "max_wait_s", "start")} == {
        "priority_class": "research",
        "max_wait_s": 120.0,
        "start": "now",
    }
    plain = await api.call(user, "POST", "/v1/requests", json=LOCAL_CPU)
    assert plain.json()["request"]["priority_class"] is None
    assert plain.json()["request"]["start"] == "now"
    in_use = await api.as_admin("DELETE", f"{CLASSES}/research")
    assert "named by 1 request(s)" in detail_of(in_use, 409)
    cancelled = await api.call(user, "POST", f"/v1/requests/{view['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert (await api.as_admin("DELETE", f"{CLASSES}/research")).status_code == 204
    await api.invariants()


async def _submit(api: Api, token: str, **asked: Any) -> httpx.Response:
    return await api.call(token, "POST", "/v1/requests", json={**LOCAL_CPU, **asked})


async def test_the_openapi_document_describes_the_classes(api: Api) -> None:
    spec = (await api.client.get("/openapi.json")).json()
    paths = spec["paths"]
    assert set(paths[CLASSES]) == {"get"}
    assert set(paths[f"{CLASSES}/{{name}}"]) == {"get", "put", "delete"}
    put = paths[f"{CLASSES}/{{name}}"]["put"]["responses"]
    assert {"200", "201", "403", "409", "422"} <= set(put)
    submitted = spec["components"]["schemas"]["SubmittedRequest"]["properties"]
    assert {"priority_class", "max_wait_s", "start"} <= set(submitted)
    assert "admission queue" in submitted["start"]["description"]
