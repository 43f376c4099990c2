"""Submissions settled together (group commit) on real PostgreSQL and Redis.

Concurrent submissions share their transactions, and each caller still gets its own answer;
when the batch cannot be settled together (another replica took the capacity its snapshot
showed free, a quota, a failure in its transaction), every request goes the one-request way,
so nothing is oversubscribed, no reservation leaks and no accepted request is lost; a brain
that stops in the middle of a batch leaves its requests pending, and places them when it
starts again.
"""

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from redis.asyncio import Redis

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.claim import Claim
from cnbrain.placement.request_check import parse_request
from cnbrain.regional.app import create_app
from cnbrain.regional.settings import Settings
from cnbrain.regional.use_cases.deciding import Decider
from cnbrain.regional.use_cases.placing import EscalatedAnswer, Placer
from cnbrain.storage import ledger_store, request_events, requests, tenants
from tests.databases import create_postgres_database, drop_postgres_database, require_redis
from tests.ledger.windows import HOUR
from tests.regional.brain_api import Api, brain_settings
from tests.regional.fifty_gpus import CAPACITY, ONE_GPU, fifty_gpu_map

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def settings(tmp_path: Path) -> AsyncIterator[Settings]:
    """Settings of a brain on the 50-A100 test map (see test_replicas), on a new database."""
    database = await create_postgres_database("cnbrain_batch")
    redis = await require_redis()
    try:
        yield brain_settings(database, redis, tmp_path, map=fifty_gpu_map(tmp_path / "map.json"))
    finally:
        await drop_postgres_database(database)


@pytest_asyncio.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    async with running(settings) as api:
        yield api


@contextlib.asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Api]:
    """A brain in this process, driven over ASGI; an error in it answers 500 (as a server
    would) rather than raising in the test."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://brain", timeout=60
        ) as client:
            yield Api(client=client, brain=app.state.brain, cases=app.state.brain.requests)


async def submit_all(
    api: Api, token: str, count: int, body: dict[str, Any] | None = None, **kwargs: Any
) -> list[httpx.Response]:
    return list(
        await asyncio.gather(
            *(
                api.call(token, "POST", "/v1/requests", json=body or ONE_GPU, **kwargs)
                for _ in range(count)
            )
        )
    )


async def held(api: Api, tenant: str) -> int:
    async with api.brain.sessions() as session:
        return len(await ledger_store.held_reservations(session, tenant_id=tenant))


async def states(api: Api, tenant: str) -> dict[str, str]:
    async with api.brain.sessions() as session:
        page, _ = await requests.list_requests(session, tenant_id=tenant, limit=1000)
    return {r.id: r.state for r in page}


async def event_kinds(api: Api, tenant: str) -> dict[str, tuple[str, ...]]:
    """The kinds of the events of each of the tenant's requests, oldest first."""
    found: dict[str, tuple[str, ...]] = {}
    for request_id in await states(api, tenant):
        async with api.brain.sessions() as session:
            events = await request_events.events_of(
                session, request_id=request_id, tenant_id=tenant
            )
        assert events is not None
        found[request_id] = tuple(e.kind for e in events)
    return found


async def replica_takes(api: Api, taken: dict[str, int]) -> list[str]:
    """What another replica on the same database does: take `taken[site]` A100s on each site
    directly in the database, without announcing it (this brain's cached snapshot still shows
    them free). Returns the reservation ids."""
    tenant = f"replica-{uuid.uuid4().hex[:6]}"
    claims: list[Claim] = []
    async with api.brain.sessions.begin() as session:
        await tenants.create_tenant(session, tenant_id=tenant, name=tenant)
        user = await tenants.create_user(session, name="r", role="tenant-user", tenant_id=tenant)
        for site, count in taken.items():
            for i in range(count):
                request_id = f"req-{tenant}-{site}-{i}"
                claims.append(gpu_claim(request_id, tenant, site))
        await requests.insert_requests(
            session,
            [
                requests.NewRequest(
                    request_id=c.request_id, tenant_id=tenant, user_id=user.id, body={}
                )
                for c in claims
            ],
        )
        await ledger_store.reserve_many(session, claims=claims)
    return [c.reservation_id for c in claims]


async def replica_releases(api: Api, reservation_ids: list[str]) -> None:
    async with api.brain.sessions.begin() as session:
        for reservation_id in reservation_ids:
            await ledger_store.release(session, reservation_id=reservation_id)


def gpu_claim(request_id: str, tenant: str, site: str) -> Claim:
    return Claim(
        reservation_id=f"rsv-{request_id}",
        request_id=request_id,
        tenant_id=tenant,
        site_id=site,
        cpu_m=1000,
        mem_mib=1024,
        storage_gib=0,
        accelerator_model="A100",
        accelerator_milli=1000,
        link_ids=(),
        mbps=0,
        window=HOUR,
    )


def count_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[object]:
    """Wrap the coroutine method `owner.name`; the returned list gets one entry per call."""
    calls: list[object] = []
    real = getattr(owner, name)

    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return await real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def group_of(api: Api) -> Any:
    return api.use_cases.submit.group_commit


async def test_concurrent_submissions_share_transactions_and_get_their_own_answers(
    api: Api,
) -> None:
    tenant, _, user = await api.tenant()
    group = group_of(api)
    batches_before = group.batches
    answers = await submit_all(api, user, 40)
    assert {a.status_code for a in answers} == {201}
    views = [a.json() for a in answers]
    assert len({v["id"] for v in views}) == 40
    assert all(v["state"] == "placed" and v["tenant"] == tenant for v in views)
    assert group.batches - batches_before < 40  # settled together, not one by one
    for answer, view in zip(answers, views, strict=True):
        assert answer.headers["location"] == f"/v1/requests/{view['id']}"
        stored = (await api.call(user, "GET", f"/v1/requests/{view['id']}")).json()
        assert stored == view  # the answer built in memory is what the database holds
        decision = view["decision"]
        assert decision["reservation_id"] and decision["site"] == view["site"]
    per_site: dict[str, int] = {}
    for view in views:
        per_site[view["site"]] = per_site.get(view["site"], 0) + 1
    assert sum(per_site.values()) == 40 and per_site.get("AA-dc", 0) <= 4
    assert await held(api, tenant) == 40
    audit = (await api.as_admin("GET", "/v1/audit", params={"limit": 500})).json()["items"]
    mine = {(e["object_id"], e["action"]) for e in audit if e["tenant"] == tenant}
    assert all((v["id"], "request.submitted") in mine for v in views)
    assert all((v["id"], "request.placed") in mine for v in views)
    await api.invariants()


async def test_a_batch_short_of_what_a_replica_took_goes_one_by_one(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant, _, user = await api.tenant()
    await api.brain.live_map.snapshot()  # cached: shows all 50 A100 free
    taken = await replica_takes(api, {"CC-hub": 30, "BB-hub": 15})
    one_by_one = count_calls(monkeypatch, Placer, "place")
    answers = await submit_all(api, user, 20)
    assert one_by_one  # the batch did not fit: its requests went the one-request way
    assert {a.status_code for a in answers} == {201}
    views = [a.json() for a in answers]
    placed = [v for v in views if v["state"] == "placed"]
    assert len(placed) == CAPACITY - 45
    assert all(v["state"] == "rejected" and v["reason"] for v in views if v not in placed)
    assert await held(api, tenant) == CAPACITY - 45
    assert set((await states(api, tenant)).values()) == {"placed", "rejected"}
    await api.invariants()
    await replica_releases(api, taken)
    await api.invariants()


async def test_a_rejection_on_a_cached_snapshot_is_decided_again_on_a_fresh_one(
    api: Api,
) -> None:
    tenant, _, user = await api.tenant()
    taken = await replica_takes(api, {"CC-hub": 30, "BB-hub": 16, "AA-dc": 4, "BB-dc": 8})
    api.brain.live_map.capacity_changed()
    snapshot, fresh = await api.brain.live_map.snapshot()
    assert fresh and not snapshot.free_acc.any()  # cached: every A100 taken
    await replica_releases(api, taken[:3])  # ... and given back behind its back
    answers = await submit_all(api, user, 5)
    views = [a.json() for a in answers]
    assert sorted(v["state"] for v in views) == ["placed"] * 3 + ["rejected"] * 2
    assert await held(api, tenant) == 3
    await replica_releases(api, taken[3:])
    await api.invariants()


async def test_a_quota_across_a_batch_admits_exactly_its_limit(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant, _, user = await api.tenant()
    limited = await api.as_admin("PUT", f"/v1/tenants/{tenant}/quota", json={"accelerators": 3})
    assert limited.status_code == 200, limited.text
    one_by_one = count_calls(monkeypatch, Placer, "place")
    views = [a.json() for a in await submit_all(api, user, 8)]
    assert one_by_one  # a batch over the quota is not taken: its requests go one by one
    assert sum(v["state"] == "placed" for v in views) == 3
    assert all("quota" in v["reason"] for v in views if v["state"] == "rejected")
    quota = (await api.call(user, "GET", f"/v1/tenants/{tenant}/quota")).json()
    assert quota["used_accelerators"] == 3 and quota["used_active_requests"] == 3
    await api.invariants()


async def test_a_cohort_refusing_some_of_a_batch_settles_the_rest_in_it(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    cohort = f"batch-{uuid.uuid4().hex[:8]}"
    lender, _, _ = await api.tenant()
    borrower, _, borrower_user = await api.tenant()
    _, _, alone_user = await api.tenant()
    roomy = {"cpu_cores": 64, "memory_gib": 64}
    for tenant, share in (
        (lender, {"nominal": {**roomy, "accelerators": {"A100": 2}}}),
        (
            borrower,
            {
                "nominal": {**roomy, "accelerators": {"A100": 2}},
                "borrowing_limit": {"accelerators": {"A100": 2}},
            },
        ),
    ):
        put = await api.as_admin(
            "PUT", f"/v1/tenants/{tenant}/fair-share", json={"cohort": cohort, **share}
        )
        assert put.status_code == 201, put.text
    one_by_one = count_calls(monkeypatch, Placer, "place")
    group = group_of(api)
    batches_before = group.batches
    body = {**ONE_GPU, "national_optimum": False}
    theirs, alone = await asyncio.gather(
        submit_all(api, borrower_user, 8, body), submit_all(api, alone_user, 8, body)
    )
    assert group.batches - batches_before < 16
    assert not one_by_one  # the refused were rejected in their batch, the rest placed in it
    views = [a.json() for a in theirs]
    # Its nominal 2 and the lender's idle 2: its borrowing limit.
    assert sum(v["state"] == "placed" for v in views) == 4
    refused = [v for v in views if v["state"] == "rejected"]
    assert len(refused) == 4
    assert all(v["reason"].startswith(f"the quota of cohort {cohort!r}") for v in refused)
    assert all(v["decision"]["reservation_id"] is None for v in refused)
    assert [a.json()["state"] for a in alone] == ["placed"] * 8
    assert await held(api, borrower) == 4
    await api.invariants()


async def test_a_failure_in_the_batch_transaction_leaks_nothing_and_loses_nothing(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant, _, user = await api.tenant()
    real = requests.set_states
    failures = 0

    async def fail_once(*args: Any, **kwargs: Any) -> Any:
        nonlocal failures
        if failures == 0:  # after reserve_many took every reservation of the batch
            failures += 1
            raise ConnectionResetError("the database went away")
        return await real(*args, **kwargs)

    monkeypatch.setattr(requests, "set_states", fail_once)
    one_by_one = count_calls(monkeypatch, Placer, "place")
    answers = await submit_all(api, user, 12)
    assert failures == 1 and one_by_one
    assert {a.status_code for a in answers} == {201}
    assert all(a.json()["state"] == "placed" for a in answers)
    assert await held(api, tenant) == 12  # each exactly once: the batch's were rolled back
    assert set((await event_kinds(api, tenant)).values()) == {("submitted", "placed")}
    await api.invariants()


async def test_the_same_idempotency_key_in_one_batch_makes_one_request(api: Api) -> None:
    tenant, _, user = await api.tenant()
    headers = {"Idempotency-Key": "order-7"}
    answers = await submit_all(api, user, 6, headers=headers)
    assert sorted(a.status_code for a in answers) == [200] * 5 + [201]
    assert len({a.json()["id"] for a in answers}) == 1
    assert await held(api, tenant) == 1
    # Redis forgot the key: the database's unique key still answers with the first request.
    client = Redis.from_url(api.brain.settings.redis_url)
    try:
        keys = [
            k async for k in client.scan_iter(match=f"cnbrain:{api.brain.settings.bus_namespace}:*")
        ]
        await client.delete(*[k for k in keys if b":idem:" in k])
    finally:
        await client.aclose()
    again = await submit_all(api, user, 3, headers=headers)
    assert [a.status_code for a in again] == [200] * 3
    assert {a.json()["id"] for a in again} == {answers[0].json()["id"]}
    assert await held(api, tenant) == 1
    await api.invariants()


async def test_a_brain_stopped_mid_batch_leaves_its_requests_pending_and_places_them_later(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    stuck = asyncio.Event()
    real = Decider.decide

    async def stop_here(self: Decider, batch: Any) -> Any:
        stuck.set()
        await asyncio.Event().wait()  # the process dies here, after storing the batch
        return await real(self, batch)

    async with running(settings) as api:
        tenant, _, user = await api.tenant()
        monkeypatch.setattr(Decider, "decide", stop_here)
        calls = asyncio.ensure_future(submit_all(api, user, 7))
        await asyncio.wait_for(stuck.wait(), timeout=30)
        stored = await states(api, tenant)
        assert stored and set(stored.values()) == {"pending"}  # the batch was stored first
        group_of(api)._worker.cancel()  # what the end of the process does to the batch
        answers = await asyncio.wait_for(calls, timeout=30)
        # No caller was told its request was placed; the ones not yet stored (still waiting
        # for the next batch) were never accepted and are not in the database.
        assert {a.status_code for a in answers} == {500}
        assert await states(api, tenant) == stored
        assert await held(api, tenant) == 0
        monkeypatch.setattr(Decider, "decide", real)
    async with running(settings) as again:
        assert await states(again, tenant) == dict.fromkeys(stored, "placed")
        assert await held(again, tenant) == len(stored)
        assert await event_kinds(again, tenant) == dict.fromkeys(stored, ("submitted", "placed"))
        await again.invariants()


async def test_replicas_starting_together_recover_each_pending_request_once(
    settings: Settings,
) -> None:
    async with running(settings) as api:
        tenant, _, _ = await api.tenant()
        async with api.brain.sessions.begin() as session:
            user_id = (await tenants.list_users(session, tenant_id=tenant))[0].id
            await requests.insert_requests(
                session,
                [
                    requests.NewRequest(
                        request_id=f"req-left-{i}",
                        tenant_id=tenant,
                        user_id=user_id,
                        body={**ONE_GPU, "id": f"req-left-{i}", "tenant": tenant},
                    )
                    for i in range(12)
                ],
            )
    one = settings.model_copy(update={"instance_id": "one"})
    two = settings.model_copy(update={"instance_id": "two"})
    async with contextlib.AsyncExitStack() as stack:
        first, _ = await asyncio.gather(
            stack.enter_async_context(running(one)), stack.enter_async_context(running(two))
        )
        assert set((await states(first, tenant)).values()) == {"placed"}
        assert await held(first, tenant) == 12
        await first.invariants()


async def test_a_new_key_used_by_many_requests_at_once_is_looked_up_once(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, user = await api.tenant()
    lookups = count_calls(monkeypatch, tenants, "authenticate")
    answers = await asyncio.gather(
        *(api.call(user, "GET", "/v1/requests") for _ in range(12)),
        *(api.call(user + "x", "GET", "/v1/requests") for _ in range(12)),
    )
    assert [a.status_code for a in answers] == [200] * 12 + [401] * 12
    assert len(lookups) == 2  # one per token, the others waited for it
    again = await api.call(user, "GET", "/v1/requests")
    assert again.status_code == 200 and len(lookups) == 2  # then the verified key is cached


async def test_national_answers_are_recorded_together_and_a_failing_one_alone(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The national brain's answers that arrive together are written in one transaction;
    when one of them can no longer be written (its request was settled otherwise meanwhile),
    the others are still written, each in its own, and only that one gets the error."""
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    pending: list[PlacementRequest] = []
    async with api.brain.sessions.begin() as session:
        await tenants.create_tenant(session, tenant_id=tenant, name=tenant)
        user = await tenants.create_user(session, name="u", role="tenant-user", tenant_id=tenant)
        for i in range(6):
            request = parse_request({**ONE_GPU, "id": f"req-{tenant}-{i}", "tenant": tenant})
            await requests.insert_requests(
                session,
                [
                    requests.NewRequest(
                        request_id=request.id,
                        tenant_id=tenant,
                        user_id=user.id,
                        body=request.model_dump(mode="json"),
                    )
                ],
            )
            pending.append(request)
    group = api.use_cases.placer.escalation_records
    writes = count_calls(monkeypatch, requests, "set_states")

    def answer(request: PlacementRequest) -> EscalatedAnswer:
        rejected = Decision(
            request_id=request.id,
            status=DecisionStatus.REJECTED,
            policy="federation",
            reason="no region could place it: none has an A100 free",
        )
        return EscalatedAnswer(request, rejected, actor="system")

    together = await asyncio.gather(*(group.submit(answer(r)) for r in pending[:3]))
    assert [(w.state, w.at is not None) for w in together] == [("rejected", True)] * 3
    assert len(writes) == 1

    async with api.brain.sessions.begin() as session:
        await requests.set_states(session, [requests.StateChange(pending[4].id, "failed")])
    writes.clear()
    apart = await asyncio.gather(
        *(group.submit(answer(r)) for r in pending[3:]), return_exceptions=True
    )
    assert isinstance(apart[1], requests.InvalidTransition)
    assert [getattr(w, "state", None) for w in apart] == ["rejected", None, "rejected"]
    assert len(writes) == 1 + 3  # the batch, rolled back; then one each
    assert await states(api, tenant) == {
        **{r.id: "rejected" for r in pending},
        pending[4].id: "failed",
    }
    async with api.brain.sessions() as session:
        stored = await requests.get_decision(session, request_id=pending[3].id)
    decided = together[0].decision
    assert decided is not None
    assert stored is not None and stored["reason"] == decided.reason
