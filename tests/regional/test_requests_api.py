"""The tenant API on PostgreSQL and Redis: submit, read, list, cancel, quote, idempotency."""

from datetime import datetime
from typing import Any

import pytest

from cnbrain.storage import requests, tenants
from tests.regional.bodies import GPU_TRAINING, LOCAL_CPU
from tests.regional.brain_api import Api

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_submit_places_and_reserves(api: Api) -> None:
    tenant, _, user = await api.tenant()
    made = await api.call(user, "POST", "/v1/requests", json=GPU_TRAINING)
    assert made.status_code == 201, made.text
    view = made.json()
    assert view["state"] == "placed" and view["tenant"] == tenant
    assert made.headers["location"] == f"/v1/requests/{view['id']}"
    decision = view["decision"]
    assert decision["site"] == view["site"]
    assert [s["owner"] for s in decision["path"]["segments"]] == ["east", "national", "west"]
    assert decision["reservation_id"]
    assert decision["explanation"]["rejections"]
    quota = await api.call(user, "GET", f"/v1/tenants/{tenant}/quota")
    assert quota.json()["used_accelerators"] == 8
    await api.invariants()


async def test_get_list_and_paginate(api: Api) -> None:
    _, _, user = await api.tenant()
    ids = []
    for _ in range(5):
        made = await api.call(user, "POST", "/v1/requests", json=LOCAL_CPU)
        ids.append(made.json()["id"])
    one = await api.call(user, "GET", f"/v1/requests/{ids[0]}")
    assert one.status_code == 200 and one.json()["id"] == ids[0]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await api.call(user, "GET", "/v1/requests", params=params)).json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(seen) == sorted(ids)
    placed = (await api.call(user, "GET", "/v1/requests", params={"state": "placed"})).json()
    assert len(placed["items"]) == 5


async def test_cancel_releases_everything(api: Api) -> None:
    tenant, _, user = await api.tenant()
    before, _ = await api.brain.live_map.snapshot()
    made = (await api.call(user, "POST", "/v1/requests", json=GPU_TRAINING)).json()
    cancelled = await api.call(user, "POST", f"/v1/requests/{made['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    after, _ = await api.brain.live_map.snapshot()
    assert (before.free_acc == after.free_acc).all()
    assert (before.residual_mbps == after.residual_mbps).all()
    quota = (await api.call(user, "GET", f"/v1/tenants/{tenant}/quota")).json()
    assert quota["used_accelerators"] == 0 and quota["used_active_requests"] == 0
    again = await api.call(user, "POST", f"/v1/requests/{made['id']}/cancel")
    assert again.status_code == 409
    assert again.headers["content-type"].startswith("application/problem+json")
    await api.invariants()


async def events(api: Api, token: str, request_id: str) -> list[dict[str, Any]]:
    answer = await api.call(token, "GET", f"/v1/requests/{request_id}/events")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    assert body["request"] == request_id
    listed: list[dict[str, Any]] = body["events"]
    times = [datetime.fromisoformat(e["at"]) for e in listed]
    assert times == sorted(times)
    return listed


async def test_events_tell_submitted_placed_and_cancelled(api: Api) -> None:
    _, _, user = await api.tenant()
    operator = await api.user(role="operator", tenant=None)
    made = (await api.call(user, "POST", "/v1/requests", json=LOCAL_CPU)).json()
    placed = await events(api, user, made["id"])
    assert [(e["kind"], e["detail"]) for e in placed[1:]] == [("placed", {"site": made["site"]})]
    assert placed[0]["kind"] == "submitted" and placed[0]["detail"]["by"]
    await api.call(user, "POST", f"/v1/requests/{made['id']}/cancel")
    cancelled = await events(api, user, made["id"])
    assert [e["kind"] for e in cancelled] == ["submitted", "placed", "cancelled"]
    assert cancelled[-1]["detail"] == {"by": placed[0]["detail"]["by"]}
    assert await events(api, operator, made["id"]) == cancelled
    missing = await api.call(user, "GET", "/v1/requests/req-nothing/events")
    assert missing.status_code == 404


async def test_a_tenant_does_not_learn_who_acted_for_staff(api: Api) -> None:
    _, _, user = await api.tenant()
    operator = await api.user(role="operator", tenant=None)
    made = (await api.call(user, "POST", "/v1/requests", json=LOCAL_CPU)).json()
    assert (await api.call(operator, "POST", f"/v1/requests/{made['id']}/cancel")).is_success
    seen_by_staff = await events(api, operator, made["id"])
    assert seen_by_staff[-1]["kind"] == "cancelled" and seen_by_staff[-1]["detail"]["by"]
    seen_by_tenant = await events(api, user, made["id"])
    assert seen_by_tenant[-1] == {**seen_by_staff[-1], "detail": {}}
    assert seen_by_tenant[0]["detail"]["by"] == seen_by_staff[0]["detail"]["by"]  # its own


async def test_events_of_a_rejected_request_give_the_reason(api: Api) -> None:
    _, _, user = await api.tenant()
    impossible = {
        **LOCAL_CPU,
        "resources": {"cpu": 1, "memory_gib": 1, "accelerator": {"model": "A100", "count": 100000}},
    }
    made = (await api.call(user, "POST", "/v1/requests", json=impossible)).json()
    told = await events(api, user, made["id"])
    assert [e["kind"] for e in told] == ["submitted", "rejected"]
    assert told[-1]["detail"] == {"reason": made["reason"]}


async def test_a_pending_request_cannot_be_cancelled_while_it_is_decided(api: Api) -> None:
    tenant, _, user = await api.tenant()
    async with api.brain.sessions.begin() as session:
        user_id = (await tenants.list_users(session, tenant_id=tenant))[0].id
        await requests.insert_requests(
            session,
            [
                requests.NewRequest(
                    request_id="req-being-decided",
                    tenant_id=tenant,
                    user_id=user_id,
                    body={**GPU_TRAINING, "id": "req-being-decided", "tenant": tenant},
                )
            ],
        )
    refused = await api.call(user, "POST", "/v1/requests/req-being-decided/cancel")
    assert refused.status_code == 409
    assert "pending: it is being decided now" in refused.json()["detail"]
    assert (await api.call(user, "GET", "/v1/requests/req-being-decided")).json()[
        "state"
    ] == "pending"


async def test_staff_submit_for_a_tenant_that_exists_only(api: Api) -> None:
    tenant, _, _ = await api.tenant()
    body = {k: v for k, v in GPU_TRAINING.items() if k != "id"}
    for _ in range(2):  # the second time the brain knows the tenant already
        made = await api.as_admin("POST", "/v1/requests", json={**body, "tenant": tenant})
        assert made.status_code == 201, made.text
        assert made.json()["tenant"] == tenant
    for unknown in ("no-such-tenant", "no-such-tenant"):
        refused = await api.as_admin("POST", "/v1/requests", json={**body, "tenant": unknown})
        assert refused.status_code == 422
        assert "unknown tenant 'no-such-tenant'" in refused.json()["detail"]
    missing = await api.as_admin("POST", "/v1/requests", json=body)
    assert missing.status_code == 422 and "staff must name the tenant" in missing.text


async def test_quote_reserves_nothing(api: Api) -> None:
    _, _, user = await api.tenant()
    before, _ = await api.brain.live_map.snapshot()
    quote = await api.call(user, "POST", "/v1/quotes", json=GPU_TRAINING)
    assert quote.status_code == 200, quote.text
    body = quote.json()
    assert body["decision"]["status"] == "placed" and body["decision"]["reservation_id"] is None
    assert all(alt["site"] != body["decision"]["site"] for alt in body["alternatives"])
    assert body["alternatives"]
    after, _ = await api.brain.live_map.snapshot()
    assert (before.free_acc == after.free_acc).all()
    listed = (await api.call(user, "GET", "/v1/requests")).json()
    assert listed["items"] == []


async def test_rejection_says_which_constraints(api: Api) -> None:
    _, _, user = await api.tenant()
    impossible = {
        **LOCAL_CPU,
        "resources": {"cpu": 1, "memory_gib": 1, "accelerator": {"model": "A100", "count": 100000}},
    }
    made = await api.call(user, "POST", "/v1/requests", json=impossible)
    assert made.status_code == 201
    view = made.json()
    assert view["state"] == "rejected"
    assert "capacity" in view["reason"] or "accelerator" in view["reason"]
    assert view["decision"]["status"] == "rejected"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"source_province": "ZZ"}, "source_province"),
        ({"resources": {"cpu": -1, "memory_gib": 1}}, "resources.cpu"),
        ({"objective": {"cost": "cheap"}}, "objective.cost"),
        ({"duration_hours": 0}, "duration_hours"),
        ({"resources": {"cpu": 1, "memory_gib": 1, "nodes": 0}}, "resources.nodes"),
        ({"resources": {"cpu": 1, "memory_gib": 1, "nodes": 1.5}}, "resources.nodes"),
        ({"resources": {"cpu": 1000, "memory_gib": 1, "nodes": 100_000}}, "resources.nodes"),
        (
            {"resources": {"cpu": 1, "memory_gib": 1, "accelerator": {"model": "Z1", "count": 1}}},
            "resources.accelerator.model",
        ),
    ],
)
async def test_bad_request_is_422_problem_naming_the_field(
    api: Api, change: dict[str, Any], field: str
) -> None:
    _, _, user = await api.tenant()
    answer = await api.call(user, "POST", "/v1/requests", json={**LOCAL_CPU, **change})
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem = answer.json()
    assert problem["status"] == 422
    assert problem["errors"][0]["field"] == field
    listed = (await api.call(user, "GET", "/v1/requests")).json()
    assert listed["items"] == []


async def test_idempotency_key_returns_the_first_answer(api: Api) -> None:
    tenant, _, user = await api.tenant()
    headers = {"Idempotency-Key": "order-42"}
    first = await api.call(user, "POST", "/v1/requests", json=GPU_TRAINING, headers=headers)
    second = await api.call(user, "POST", "/v1/requests", json=GPU_TRAINING, headers=headers)
    assert first.status_code == 201 and second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    quota = (await api.call(user, "GET", f"/v1/tenants/{tenant}/quota")).json()
    assert quota["used_accelerators"] == 8 and quota["used_active_requests"] == 1
    _, _, other_user = await api.tenant()
    third = await api.call(other_user, "POST", "/v1/requests", json=GPU_TRAINING, headers=headers)
    assert third.status_code == 201 and third.json()["id"] != first.json()["id"]


async def test_quota_limits_acceptance(api: Api) -> None:
    tenant, _, user = await api.tenant()
    limited = await api.as_admin("PUT", f"/v1/tenants/{tenant}/quota", json={"accelerators": 16})
    assert limited.status_code == 200, limited.text
    states = [
        (await api.call(user, "POST", "/v1/requests", json=GPU_TRAINING)).json()["state"]
        for _ in range(3)
    ]
    assert states == ["placed", "placed", "rejected"]
    listed = (await api.call(user, "GET", "/v1/requests", params={"state": "rejected"})).json()
    assert "quota" in listed["items"][0]["reason"]


async def test_health_and_readiness(api: Api) -> None:
    assert (await api.client.get("/healthz")).json()["status"] == "ok"
    ready = (await api.client.get("/readyz")).json()
    assert ready["status"] == "ready" and ready["map"] == "china" and ready["sites"] == 96


async def test_openapi_documents_every_endpoint(api: Api) -> None:
    spec = (await api.client.get("/openapi.json")).json()
    paths = spec["paths"]
    for path in (
        "/v1/requests",
        "/v1/requests/{request_id}",
        "/v1/requests/{request_id}/cancel",
        "/v1/requests/{request_id}/events",
        "/v1/quotes",
        "/v1/sites",
        "/v1/links",
        "/v1/tenants",
        "/v1/users",
        "/v1/audit",
        "/v1/weight-matrix",
    ):
        assert path in paths, path
    submit = paths["/v1/requests"]["post"]
    assert submit["requestBody"]["content"]["application/json"]["examples"]


async def test_openapi_types_the_request_body_and_declares_problems(api: Api) -> None:
    spec = (await api.client.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    for path in ("/v1/requests", "/v1/quotes"):
        body = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        assert body["schema"] == {"$ref": "#/components/schemas/SubmittedRequest"}, path
    submitted = schemas["SubmittedRequest"]
    assert {"source_province", "resources", "duration_hours"} <= set(submitted["required"])
    assert "id" not in submitted["properties"]
    assert "HTTPValidationError" not in schemas
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            for status, response in responses.items():
                if status[0] in "45":
                    assert set(response["content"]) == {"application/problem+json"}, (
                        path,
                        method,
                        status,
                    )
            if path != "/healthz":
                assert "503" in responses, (path, method)
            if operation.get("security"):
                assert "401" in responses, (path, method)
            if "requestBody" in operation:
                assert {"400", "413", "422"} <= set(responses), (path, method)


async def test_a_fraction_of_an_accelerator_is_placed_and_counts_its_share(api: Api) -> None:
    tenant, _, user = await api.tenant()
    inference: dict[str, Any] = {
        "source_province": "GD",
        "resources": {"cpu": 2, "memory_gib": 8, "accelerator": {"model": "T4", "milli": 250}},
        "duration_hours": 2,
        "workload_class": "inference",
    }
    made = await api.call(user, "POST", "/v1/requests", json=inference)
    assert made.status_code == 201, made.text
    assert made.json()["state"] == "placed"
    quota = (await api.call(user, "GET", f"/v1/tenants/{tenant}/quota")).json()
    assert quota["used_accelerators"] == 0.25
    by_memory = {"model": "T4", "memory_gib": 6}  # 6 of the T4's 16 GiB: 375 thousandths
    body = {**inference, "resources": {**inference["resources"], "accelerator": by_memory}}
    made = await api.call(user, "POST", "/v1/requests", json=body)
    assert made.status_code == 201, made.text
    assert made.json()["state"] == "placed"
    accelerator = made.json()["request"]["resources"]["accelerator"]
    assert accelerator == {**by_memory, "count": 1, "milli": None}
    quota = (await api.call(user, "GET", f"/v1/tenants/{tenant}/quota")).json()
    assert quota["used_accelerators"] == 0.625
    for accelerator, field in (
        ({"model": "T4", "milli": 250, "count": 2}, "resources.accelerator.milli"),
        ({"model": "T4", "milli": 1000}, "resources.accelerator.milli"),
        ({"model": "T4", "memory_gib": 16}, "resources.accelerator.memory_gib"),
        ({"model": "T4", "memory_gib": 4, "milli": 250}, "resources.accelerator.memory_gib"),
    ):
        body = {**inference, "resources": {**inference["resources"], "accelerator": accelerator}}
        refused = await api.call(user, "POST", "/v1/requests", json=body)
        assert refused.status_code == 422 and field in refused.text, refused.text
    await api.invariants()
