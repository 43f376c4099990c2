"""Requests that start now held to their tenant's cohort quota, on PostgreSQL and Redis, on the
tiny map: within the nominal quota, and borrowing the other members' idle quota up to the
borrowing limit, they are placed; beyond that they are rejected with a reason that names the
cohort's quota. A tenant in no cohort is held to nothing of the kind.

Only CC-hub has Ascend910B accelerators (16), so every request here asks for them; each test
makes its own tenants and cohort, and cancels what it placed.
"""

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import text

from cnbrain.federation.local_ledger import prepare_parts
from cnbrain.ledger.claim import Claim
from cnbrain.regional.use_cases.admission_inputs import running_work
from cnbrain.regional.use_cases.cohort_quota import CohortQuotas, reserve_within_cohorts
from cnbrain.scheduling.resources import Resources
from cnbrain.scheduling.work import usage_by_tenant
from cnbrain.storage import fair_shares, ledger_store, peer_ledger, priority_classes
from cnbrain.storage.errors import CohortQuotaExceeded
from cnbrain.storage.requests import NewRequest, insert_requests
from cnbrain.storage.running_work import elsewhere_usage, held_usage, held_work
from cnbrain.storage.tenants import create_tenant, create_user
from tests.databases import create_postgres_database, drop_postgres_database, require_redis
from tests.ledger import claims
from tests.polling import until
from tests.regional.brain_api import Api, brain_settings, serving
from tests.tiny_map import ascend_body, tiny_map_raw

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOMY = {"cpu_cores": 64, "memory_gib": 64}
"""A nominal quota of CPU and memory that no request here goes beyond."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def api(tmp_path_factory: Any) -> AsyncIterator[Api]:
    database = await create_postgres_database("cnbrain_cohort_now")
    redis = await require_redis()
    tmp = tmp_path_factory.mktemp("cohort-now")
    (tmp / "map.json").write_text(json.dumps(tiny_map_raw()), encoding="utf-8")
    settings = brain_settings(database, redis, tmp, map=str(tmp / "map.json"))
    try:
        async with serving(settings) as (app, client):
            yield Api(client=client, brain=app.state.brain, cases=app.state.brain.requests)
    finally:
        await drop_postgres_database(database)


async def _share(api: Api, tenant: str, **body: Any) -> None:
    put = await api.as_admin("PUT", f"/v1/tenants/{tenant}/fair-share", json=body)
    assert put.status_code in (200, 201), put.text


async def _submit(api: Api, token: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = await api.call(token, "POST", "/v1/requests", json=body)
    assert answer.status_code == 201, answer.text
    view: dict[str, Any] = answer.json()
    return view


async def _cohort(
    api: Api, *, lender_nominal: int, borrower_nominal: int, borrowing_limit: int
) -> tuple[str, str, str]:
    """A new cohort of a lender and a borrower (nominal quotas of Ascend910B as given, the
    borrower's borrowing limit): (cohort, lender's key, borrower's key)."""
    cohort = f"now-{uuid.uuid4().hex[:8]}"
    lender, lender_user = await api.tenant_user("c-lender")
    borrower, borrower_user = await api.tenant_user("c-borrower")
    await _share(
        api,
        lender,
        cohort=cohort,
        nominal={**ROOMY, "accelerators": {"Ascend910B": lender_nominal}},
    )
    await _share(
        api,
        borrower,
        cohort=cohort,
        nominal={**ROOMY, "accelerators": {"Ascend910B": borrower_nominal}},
        borrowing_limit={"accelerators": {"Ascend910B": borrowing_limit}},
    )
    return cohort, lender_user, borrower_user


async def _cancel_all(api: Api, token: str, views: list[dict[str, Any]]) -> None:
    for view in views:
        if view["state"] not in ("rejected", "cancelled"):
            answer = await api.call(token, "POST", f"/v1/requests/{view['id']}/cancel")
            assert answer.status_code == 200, answer.text


async def test_a_request_within_its_nominal_quota_is_placed(api: Api) -> None:
    _, _, borrower = await _cohort(api, lender_nominal=8, borrower_nominal=8, borrowing_limit=0)
    placed = await _submit(api, borrower, ascend_body(8))
    assert placed["state"] == "placed" and placed["site"] == "CC-hub"
    await _cancel_all(api, borrower, [placed])
    await api.invariants()


async def test_a_request_borrowing_idle_quota_within_its_limit_is_placed(api: Api) -> None:
    _, _, borrower = await _cohort(api, lender_nominal=12, borrower_nominal=4, borrowing_limit=8)
    views = [await _submit(api, borrower, ascend_body(4)) for _ in range(3)]
    # 4 on its nominal, then 8 borrowed of the lender's idle 12: its whole limit.
    assert [v["state"] for v in views] == ["placed"] * 3
    await _cancel_all(api, borrower, views)
    await api.invariants()


async def test_a_request_over_its_borrowing_limit_is_rejected_naming_the_quota(api: Api) -> None:
    cohort, _, borrower = await _cohort(
        api, lender_nominal=12, borrower_nominal=4, borrowing_limit=4
    )
    views = [await _submit(api, borrower, ascend_body(4)) for _ in range(2)]
    assert [v["state"] for v in views] == ["placed", "placed"]
    over = await _submit(api, borrower, ascend_body(4))
    assert over["state"] == "rejected", over
    assert over["reason"] == (
        f"the quota of cohort {cohort!r} would be exceeded: accelerator:Ascend910B: tenant "
        f"{over['tenant']!r} would hold 12000, 8000 beyond its nominal 4000, but may borrow "
        "at most 4000"
    )
    # The pool had the room (8 of 16 free): only the quota refused it.
    await _cancel_all(api, borrower, views)
    await api.invariants()


async def test_a_request_is_rejected_when_the_lenders_use_their_quota(api: Api) -> None:
    cohort, lender, borrower = await _cohort(
        api, lender_nominal=8, borrower_nominal=4, borrowing_limit=8
    )
    theirs = await _submit(api, lender, ascend_body(8))
    assert theirs["state"] == "placed"
    over = await _submit(api, borrower, ascend_body(8))
    assert over["state"] == "rejected", over
    assert over["reason"].startswith(f"the quota of cohort {cohort!r} would be exceeded: ")
    assert over["reason"].endswith("but the cohort's other members leave 0 unused")
    await _cancel_all(api, lender, [theirs])
    await api.invariants()


async def test_concurrent_requests_never_borrow_the_same_idle_quota_twice(api: Api) -> None:
    cohort = f"now-{uuid.uuid4().hex[:8]}"
    lender, _ = await api.tenant_user("c-lender")
    await _share(api, lender, cohort=cohort, nominal={**ROOMY, "accelerators": {"Ascend910B": 4}})
    borrowers = []
    for _ in range(4):
        tenant, token = await api.tenant_user("c-borrower")
        await _share(
            api,
            tenant,
            cohort=cohort,
            nominal=ROOMY,
            borrowing_limit={"accelerators": {"Ascend910B": 4}},
        )
        borrowers.append(token)
    # The lender's idle 4 fits one of them; the pool (16) would fit all.
    views = await asyncio.gather(*(_submit(api, token, ascend_body(4)) for token in borrowers))
    states = [v["state"] for v in views]
    assert sorted(states) == ["placed", "rejected", "rejected", "rejected"], views
    for token, view in zip(borrowers, views, strict=True):
        await _cancel_all(api, token, [view])
    await api.invariants()


async def test_a_tenant_in_no_cohort_is_held_to_no_cohort_quota(api: Api) -> None:
    tenant, user = await api.tenant_user("c-alone")
    # A nominal quota without a cohort counts for nothing.
    await _share(api, tenant, weight=2, nominal={**ROOMY, "accelerators": {"Ascend910B": 1}})
    views = [await _submit(api, user, ascend_body(8)) for _ in range(2)]
    assert [v["state"] for v in views] == ["placed", "placed"]
    await _cancel_all(api, user, views)
    await api.invariants()


async def test_a_unit_of_work_waits_for_another_members_to_check_the_cohorts_quota(
    api: Api,
) -> None:
    """Two borrowers on two sites (so the ledger's own rows do not order them) want the
    lender's idle 4 cores: while the first one's unit of work is open, the second waits for
    it on the members' quota rows, and once it commits sees its holdings and is refused."""
    cohort = f"now-{uuid.uuid4().hex[:8]}"
    tag = uuid.uuid4().hex[:8]
    lender, first, second = (f"c-{role}-{tag}" for role in ("lender", "first", "second"))
    memory = Resources.of(mem_mib=65_536)
    async with api.brain.sessions.begin() as session:
        for tenant in (lender, first, second):
            await create_tenant(session, tenant_id=tenant, name=tenant)
            await create_user(
                session, user_id=f"u-{tenant}", name="u", role="tenant-user", tenant_id=tenant
            )
        await fair_shares.put_share(
            session,
            lender,
            fair_shares.FairShare(cohort=cohort, nominal=memory + Resources.of(cpu_m=4000)),
        )
        for tenant in (first, second):
            share = fair_shares.FairShare(
                cohort=cohort, nominal=memory, borrowing_limit=Resources.of(cpu_m=4000)
            )
            await fair_shares.put_share(session, tenant, share)
        await insert_requests(
            session,
            [
                NewRequest(request_id=f"r-{t}", tenant_id=t, user_id=f"u-{t}", body={})
                for t in (first, second)
            ],
        )

    def claim(tenant: str, site: str) -> Claim:
        return claims.claim(
            f"rsv-{tenant}", f"r-{tenant}", tenant, site_id=site, cpu_m=4000, mem_mib=1024
        )

    async def borrow(tenant: str, site: str) -> str | None:
        """None when it borrowed; else the reason of the refusal."""
        try:
            async with api.brain.sessions.begin() as session:
                await reserve_within_cohorts(session, claims=[claim(tenant, site)])
        except CohortQuotaExceeded as refused:
            return refused.reason
        return None

    async def ended_or_waiting(task: "asyncio.Task[str | None]") -> bool | None:
        if task.done():
            return True
        async with api.brain.sessions() as probe:
            waiting = await probe.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND query LIKE '%FROM quotas%'"
                )
            )
        return True if waiting else None

    async with api.brain.sessions.begin() as session:
        await reserve_within_cohorts(session, claims=[claim(first, "AA-dc")])
        later = asyncio.create_task(borrow(second, "BB-hub"))
        await until(lambda: ended_or_waiting(later), "the second unit of work ends or waits")
    refusal = await later
    assert refusal is not None and refusal.endswith("the cohort's other members leave 0 unused")
    await api.invariants()
    async with api.brain.sessions.begin() as session:
        await ledger_store.release(session, reservation_id=f"rsv-{first}")
    await api.invariants()


async def test_the_usage_checked_is_the_rounds(api: Api) -> None:
    tenant, user = await api.tenant_user("c-usage")
    cpu_only = {**ascend_body(0), "resources": {"cpu": 3, "memory_gib": 5}}
    views = [await _submit(api, user, body) for body in (ascend_body(2), ascend_body(3), cpu_only)]
    assert [v["state"] for v in views] == ["placed"] * 3
    async with api.brain.sessions() as session:
        classes = await priority_classes.list_classes(session)
        assert classes is not None
        rounds = usage_by_tenant(running_work(await held_work(session), classes))
        checked = await held_usage(session, [tenant])
        first = await ledger_store.held_reservations(session, request_id=views[0]["id"])
        left_out = await held_usage(session, [tenant], excluding=first)
    assert checked == {tenant: rounds[tenant]}
    assert rounds[tenant]["accelerator:Ascend910B"] == 5000
    assert left_out[tenant]["accelerator:Ascend910B"] == 3000
    await _cancel_all(api, user, views)
    await api.invariants()


async def test_a_tenant_put_in_a_cohort_after_it_placed_is_held_to_it_at_once(api: Api) -> None:
    """The brain remembers for a second that a tenant is in no cohort; a change of its fair
    share made on this brain holds for its very next request."""
    tenant, user = await api.tenant_user("c-late")
    first = await _submit(api, user, ascend_body(4))
    assert first["state"] == "placed"
    await _share(
        api,
        tenant,
        cohort=f"late-{uuid.uuid4().hex[:8]}",
        nominal={**ROOMY, "accelerators": {"Ascend910B": 4}},
    )
    over = await _submit(api, user, ascend_body(4))
    assert over["state"] == "rejected", over
    assert "would be exceeded" in over["reason"]
    await _cancel_all(api, user, [first, over])
    await api.invariants()


async def test_a_tenants_cross_region_parts_use_its_cohort_quota_here(api: Api) -> None:
    """The part a source region holds of a cross-region request (its compute counted against
    the tenant's quota here, run elsewhere) is held to the tenant's cohort quota when the
    national brain prepares it, and counts as the tenant's use: in what a later request is
    checked against and in what the admission round counts."""
    cohort = f"now-{uuid.uuid4().hex[:8]}"
    tag = uuid.uuid4().hex[:8]
    lender, borrower = f"c-lender-{tag}", f"c-borrower-{tag}"
    async with api.brain.sessions.begin() as session:
        for tenant in (lender, borrower):
            await create_tenant(session, tenant_id=tenant, name=tenant)
        await create_user(
            session, user_id=f"u-{borrower}", name="u", role="tenant-user", tenant_id=borrower
        )
        await insert_requests(
            session,
            [
                NewRequest(
                    request_id=f"here-{tag}", tenant_id=borrower, user_id=f"u-{borrower}", body={}
                )
            ],
        )
        await fair_shares.put_share(
            session,
            lender,
            fair_shares.FairShare(cohort=cohort, nominal=Resources.of(cpu_m=4000)),
        )
        await fair_shares.put_share(
            session,
            borrower,
            fair_shares.FairShare(
                cohort=cohort,
                nominal=Resources.of(cpu_m=4000),
                borrowing_limit=Resources.of(cpu_m=2000),
            ),
        )

    def part(name: str, cpu_m: int, *, counts_quota: bool = True) -> Claim:
        return claims.claim(
            f"part-{name}-{tag}",
            f"elsewhere-{name}-{tag}",
            borrower,
            cpu_m=cpu_m,
            counts_quota=counts_quota,
        )

    async def prepare(claim: Claim) -> str | None:
        [outcome] = await prepare_parts(
            api.brain.sessions,
            [claim],
            ttl_ms=60_000,
            arrays=api.brain.live_map.engine.arrays,
            watch=api.brain.live_map,
            take=CohortQuotas().take_parts,
        )
        return outcome

    # 4 cores on its nominal, 2 borrowed of the lender's idle 4: its borrowing limit.
    assert await prepare(part("a", 4000)) is None
    assert await prepare(part("b", 2000)) is None
    refused = await prepare(part("c", 1000))
    assert refused is not None
    assert f"cohort {cohort!r}" in refused and "may borrow at most 2000" in refused, refused
    # A part that does not count against the quota here is not the tenant's use here.
    assert await prepare(part("d", 8000, counts_quota=False)) is None

    async with api.brain.sessions() as session:
        assert await elsewhere_usage(session, tenant_ids=[borrower]) == {
            borrower: Resources.of(cpu_m=6000)
        }
        assert (await held_usage(session, [borrower]))[borrower] == Resources.of(cpu_m=6000)
    with pytest.raises(CohortQuotaExceeded):
        async with api.brain.sessions.begin() as session:
            await reserve_within_cohorts(
                session,
                claims=[
                    replace(
                        part("e", 1000),
                        site_id="AA-dc",
                        reservation_id=f"rsv-e-{tag}",
                        request_id=f"here-{tag}",
                    )
                ],
            )

    async with api.brain.sessions.begin() as session:
        for name in "abd":
            assert await peer_ledger.release(session, reservation_id=f"part-{name}-{tag}")
    async with api.brain.sessions() as session:
        assert await elsewhere_usage(session, tenant_ids=[borrower]) == {}
    await api.invariants()
