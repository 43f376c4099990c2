"""The tenants' fair shares over REST on PostgreSQL and Redis: who may read and change them,
the units, validation naming the field, unknown tenants, the audit log, and what an admission
round reads of them.

The brain is shared by the module's tests, so each test makes tenants of its own.
"""

from typing import Any

import pytest

from cnbrain.domain import bounds
from cnbrain.scheduling.cohorts import TenantQuota
from cnbrain.scheduling.resources import Resources
from cnbrain.storage import fair_shares
from cnbrain.storage.fair_shares import MAX_QUOTA_STORAGE_GIB
from tests.regional.brain_api import Api, detail_of

pytestmark = pytest.mark.asyncio(loop_scope="module")

ZERO = {"cpu_cores": 0.0, "memory_gib": 0.0, "storage_gib": 0.0, "accelerators": {}}
BODY: dict[str, Any] = {
    "weight": 2.5,
    "cohort": "research",
    "nominal": {
        "cpu_cores": 64,
        "memory_gib": 256,
        "storage_gib": 1024,
        "accelerators": {"A100": 8},
    },
    "borrowing_limit": {"cpu_cores": 16, "accelerators": {"A100": 4}},
}


def _share(tenant: str) -> str:
    return f"/v1/tenants/{tenant}/fair-share"


def _without_time(view: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in view.items() if name != "updated_at"}


async def test_a_tenant_without_a_share_has_the_defaults(api: Api) -> None:
    tenant, user = await api.tenant_user("fs-defaults")
    shown = await api.call(user, "GET", _share(tenant))
    assert shown.status_code == 200, shown.text
    assert shown.json() == {
        "tenant": tenant,
        "weight": 1.0,
        "cohort": None,
        "nominal": ZERO,
        "borrowing_limit": ZERO,
        "updated_at": None,
    }


async def test_staff_put_and_delete_and_the_tenant_reads_its_own(api: Api) -> None:
    tenant, admin, user = await api.tenant("fs-roles")
    other, other_user = await api.tenant_user("fs-other")
    operator = await api.user(role="operator", tenant=None)
    made = await api.call(operator, "PUT", _share(tenant), json=BODY)
    assert made.status_code == 201, made.text
    expected = {
        "tenant": tenant,
        "weight": 2.5,
        "cohort": "research",
        "nominal": {
            "cpu_cores": 64.0,
            "memory_gib": 256.0,
            "storage_gib": 1024.0,
            "accelerators": {"A100": 8},
        },
        "borrowing_limit": {**ZERO, "cpu_cores": 16.0, "accelerators": {"A100": 4}},
    }
    assert _without_time(made.json()) == expected
    assert made.json()["updated_at"] is not None
    for token in (admin, user, operator):
        shown = await api.call(token, "GET", _share(tenant))
        assert shown.status_code == 200, shown.text
        assert shown.json() == made.json()
    for token in (admin, user):
        detail_of(await api.call(token, "PUT", _share(tenant), json={"weight": 9}), 403)
        detail_of(await api.call(token, "DELETE", _share(tenant)), 403)
    # another tenant's users do not see it, nor may they change their own
    assert "does not exist" in detail_of(await api.call(other_user, "GET", _share(tenant)), 404)
    detail_of(await api.call(other_user, "PUT", _share(other), json={"weight": 9}), 403)
    detail_of(await api.client.get(_share(tenant)), 401)
    assert (await api.call(user, "GET", _share(tenant))).json() == made.json()
    replaced = await api.call(operator, "PUT", _share(tenant), json={"weight": 0.5})
    assert replaced.status_code == 200, replaced.text
    assert _without_time(replaced.json()) == {
        "tenant": tenant,
        "weight": 0.5,
        "cohort": None,
        "nominal": ZERO,
        "borrowing_limit": ZERO,
    }
    deleted = await api.call(operator, "DELETE", _share(tenant))
    assert deleted.status_code == 204, deleted.text
    assert (await api.call(user, "GET", _share(tenant))).json()["updated_at"] is None
    assert "no fair share stored" in detail_of(await api.as_admin("DELETE", _share(tenant)), 404)


async def test_amounts_are_stored_in_the_ledgers_units_rounded_up(api: Api) -> None:
    tenant = await api.new_tenant("fs-units")
    body = {
        "cohort": "units",
        "nominal": {"cpu_cores": 0.0005, "memory_gib": 0.3, "storage_gib": 1.2},
    }
    made = await api.as_admin("PUT", _share(tenant), json=body)
    assert made.status_code == 201, made.text
    assert made.json()["nominal"] == {
        "cpu_cores": 0.001,
        "memory_gib": 308 / 1024,
        "storage_gib": 2.0,
        "accelerators": {},
    }
    async with api.brain.sessions() as session:
        stored = await fair_shares.get_share(session, tenant)
    assert stored is not None
    assert stored.nominal == Resources.of(cpu_m=1, mem_mib=308, storage_gib=2)


async def test_unknown_tenants_are_not_found(api: Api) -> None:
    for method, body in (("GET", None), ("PUT", BODY), ("DELETE", None)):
        answer = await api.as_admin(method, _share("fs-nobody"), json=body)
        assert "tenant 'fs-nobody' does not exist" in detail_of(answer, 404), method


def _with(**fields: Any) -> dict[str, Any]:
    return {**BODY, **fields}


def _nominal(**amounts: Any) -> dict[str, Any]:
    return _with(nominal={**BODY["nominal"], **amounts})


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_with(weight=0), "weight"),
        (_with(weight=-1), "weight"),
        (_with(weight=bounds.MAX_WEIGHT + 1), "weight"),
        (_with(weight="2"), "weight"),
        (_with(weight=True), "weight"),
        (_with(cohort="has space"), "cohort"),
        (_with(cohort="-first"), "cohort"),
        (_with(cohort="x" * 64), "cohort"),
        (_with(cohort=7), "cohort"),
        (_with(cohort=None), "borrowing_limit"),
        (_nominal(cpu_cores=-1), "nominal.cpu_cores"),
        (_nominal(cpu_cores=bounds.MAX_QUOTA_CPU_CORES * 2), "nominal.cpu_cores"),
        (_nominal(memory_gib=bounds.MAX_QUOTA_MEMORY_GIB * 2), "nominal.memory_gib"),
        (_nominal(storage_gib=MAX_QUOTA_STORAGE_GIB * 2), "nominal.storage_gib"),
        (_nominal(cpu_cores="8"), "nominal.cpu_cores"),
        (_nominal(accelerators={"A100": -1}), "nominal.accelerators.A100"),
        (_nominal(accelerators={"A100": 1.5}), "nominal.accelerators.A100"),
        (
            _nominal(accelerators={"A100": bounds.MAX_QUOTA_ACCELERATORS + 1}),
            "nominal.accelerators.A100",
        ),
        (_nominal(accelerators={"B200": 1}), "nominal.accelerators"),
        (_nominal(gpus=8), "nominal.gpus"),
        (
            _with(borrowing_limit={"cpu_cores": 1, "accelerators": {"nope": 1}}),
            "borrowing_limit.accelerators",
        ),
        (_with(borrowing_limit={"memory_gib": -0.5}), "borrowing_limit.memory_gib"),
        (_with(colour="red"), "colour"),
    ],
)
async def test_bad_bodies_are_422_naming_the_field_and_change_nothing(
    api: Api, body: dict[str, Any], field: str
) -> None:
    tenant = await api.new_tenant("fs-bad")
    detail_of(await api.as_admin("PUT", _share(tenant), json=body), 422, field)
    assert (await api.as_admin("GET", _share(tenant))).json()["updated_at"] is None


async def test_every_change_is_audited(api: Api) -> None:
    tenant, admin, _ = await api.tenant("fs-audit")
    assert (await api.as_admin("PUT", _share(tenant), json=BODY)).status_code == 201
    assert (await api.as_admin("PUT", _share(tenant), json={"weight": 3})).status_code == 200
    assert (await api.as_admin("DELETE", _share(tenant))).status_code == 204
    detail_of(await api.as_admin("PUT", _share(tenant), json={"weight": 0}), 422, "weight")
    listed = await api.as_admin(
        "GET", "/v1/audit", params={"object_type": "fair_share", "limit": 500}
    )
    assert listed.status_code == 200, listed.text
    entries = [e for e in reversed(listed.json()["items"]) if e["object_id"] == tenant]
    assert [e["action"] for e in entries] == [
        "fair_share.created",
        "fair_share.replaced",
        "fair_share.deleted",
    ]
    assert {e["tenant"] for e in entries} == {tenant}
    assert entries[0]["detail"]["weight"] == 2.5
    assert entries[0]["detail"]["nominal"]["accelerators"] == {"A100": 8}
    own = await api.call(admin, "GET", "/v1/audit", params={"object_type": "fair_share"})
    assert [e["action"] for e in reversed(own.json()["items"])] == [
        "fair_share.created",
        "fair_share.replaced",
        "fair_share.deleted",
    ]


async def test_an_admission_round_reads_what_was_put(api: Api) -> None:
    lender = await api.new_tenant("fs-lender")
    borrower = await api.new_tenant("fs-borrower")
    cohort = f"c-{lender}"
    lent = {"cohort": cohort, "weight": 3, "nominal": {"accelerators": {"H800": 16}}}
    borrowing = {
        "cohort": cohort,
        "nominal": {"cpu_cores": 8},
        "borrowing_limit": {"accelerators": {"H800": 8}},
    }
    assert (await api.as_admin("PUT", _share(lender), json=lent)).status_code == 201
    assert (await api.as_admin("PUT", _share(borrower), json=borrowing)).status_code == 201
    async with api.brain.sessions() as session:
        terms = await fair_shares.admission_terms(session)
    assert terms.weights[lender] == 3.0 and terms.weights[borrower] == 1.0
    assert terms.cohort_of[lender] == terms.cohort_of[borrower] == cohort
    members = terms.cohorts[cohort]
    assert sorted(members.members) == sorted([lender, borrower])
    assert members.quota(borrower) == TenantQuota(
        nominal=Resources.of(cpu_m=8000),
        borrowing_limit=Resources.of(accelerators={"H800": 8000}),
    )
    demand = Resources.of(accelerators={"H800": 8000})
    assert members.can_admit(borrower, demand, {}).verdict == "borrowing"


async def test_openapi_documents_the_fair_share(api: Api) -> None:
    spec = (await api.client.get("/openapi.json")).json()
    operations = spec["paths"]["/v1/tenants/{tenant_id}/fair-share"]
    assert set(operations) == {"get", "put", "delete"}
    assert {"201", "403", "404", "422"} <= set(operations["put"]["responses"])
    assert "204" in operations["delete"]["responses"]
