"""Two OS processes, each with its own engine and 60 concurrent transactions, race for the
same PostgreSQL ledger: a site with room for exactly 50 claims and a tenant whose quota admits
exactly 15. Exactly that many succeed, and the ledger invariants hold afterwards."""

import asyncio
import multiprocessing
import traceback
from collections import Counter
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

from sqlalchemy import select

from cnbrain.ledger.claim import Claim
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.document import MapDocument
from cnbrain.storage import ledger_store, registry
from cnbrain.storage.database import create_engine, session_factory
from cnbrain.storage.errors import CapacityConflict, QuotaExceeded
from cnbrain.storage.models import Quota
from cnbrain.storage.requests import NewRequest, insert_requests
from cnbrain.storage.tenants import create_tenant, create_user, set_quota
from tests.ledger.windows import HOUR
from tests.storage.capacity import leave_cpu_free

ROOM = 50
"""Claims of `CPU_M` that fit the crowded site."""
QUOTA = 15
"""Claims of `CPU_M` that fit the limited tenant's quota."""
CPU_M = 1000
ATTEMPTS = 40
"""Per process: this many claims on the crowded site, half as many by the limited tenant."""
POOL = 20


def _attachments(document: MapDocument, site_id: str) -> tuple[str, ...]:
    return tuple(link.id for link in document.links if site_id in (link.a, link.b))


async def _prepare(url: str, document: MapDocument) -> list[list[Claim]]:
    """Seed the map and tenants; the claims of each of the two processes."""
    engine = create_engine(url)
    sessions = session_factory(engine)
    cmap = ComputeNetworkMap.from_document(document)
    crowded, roomy = cmap.sites[1], next(s for s in cmap.sites if s.kind == "hub")
    shared = cmap.links[0].id  # every claim also takes a little of one backbone link
    async with sessions.begin() as session:
        await registry.seed_map(session, document=document)
        for tenant in ("free", "limited"):
            await create_tenant(session, tenant_id=tenant, name=tenant)
            await create_user(
                session, user_id=f"{tenant}-u", name="u", role="tenant-user", tenant_id=tenant
            )
        await set_quota(session, tenant_id="limited", limit_cpu_m=QUOTA * CPU_M)
        await leave_cpu_free(session, crowded.id, ROOM * CPU_M)
    work: list[list[Claim]] = [[], []]
    async with sessions.begin() as session:
        for process in (0, 1):
            for i in range(ATTEMPTS + ATTEMPTS // 2):
                tenant, site = ("free", crowded) if i < ATTEMPTS else ("limited", roomy)
                request_id = f"req-{process}-{i}"
                await insert_requests(
                    session,
                    [
                        NewRequest(
                            request_id=request_id, tenant_id=tenant, user_id=f"{tenant}-u", body={}
                        )
                    ],
                )
                links = (*_attachments(document, site.id)[: 1 + i % 2], shared)
                work[process].append(
                    Claim(
                        reservation_id=f"rsv-{request_id}",
                        request_id=request_id,
                        tenant_id=tenant,
                        site_id=site.id,
                        cpu_m=CPU_M,
                        mem_mib=64,
                        storage_gib=0,
                        accelerator_model=None,
                        accelerator_milli=0,
                        link_ids=links if i % 3 else links[::-1],
                        mbps=10,
                        window=HOUR,
                    )
                )
    await engine.dispose()
    return work


async def _race(url: str, claims: list[Claim], barrier: Barrier) -> Counter[str]:
    engine = create_engine(url, pool_size=POOL)
    sessions = session_factory(engine)
    connections = [await engine.connect() for _ in range(POOL)]
    for connection in connections:
        await connection.close()
    barrier.wait(timeout=60)

    async def attempt(claim: Claim) -> str:
        try:
            async with sessions.begin() as session:
                await ledger_store.reserve_many(session, claims=[claim])
        except CapacityConflict:
            return "capacity"
        except QuotaExceeded:
            return "quota"
        return f"ok-{claim.tenant_id}"

    try:
        return Counter(await asyncio.gather(*(attempt(claim) for claim in claims)))
    finally:
        await engine.dispose()


def _process(url: str, claims: list[Claim], barrier: Barrier, results: "Queue[Any]") -> None:
    try:
        results.put(dict(asyncio.run(_race(url, claims, barrier))))
    except BaseException:
        results.put(traceback.format_exc())


async def _check(url: str) -> tuple[int, int]:
    engine = create_engine(url)
    try:
        async with session_factory(engine)() as session:
            await ledger_store.check_invariants(session)
            quota = await session.scalar(
                select(Quota.used_cpu_m).where(Quota.tenant_id == "limited")
            )
            held = len(await ledger_store.held_reservations(session, tenant_id="free"))
    finally:
        await engine.dispose()
    return int(quota or 0), held


def test_two_processes_never_oversubscribe_a_site_or_a_quota(
    postgres_url: str, china: MapDocument
) -> None:
    work = asyncio.run(_prepare(postgres_url, china))
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    results: Queue[Any] = context.Queue()
    processes = [
        context.Process(target=_process, args=(postgres_url, claims, barrier, results))
        for claims in work
    ]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    failures = [outcome for outcome in outcomes if not isinstance(outcome, dict)]
    assert not failures, failures[0]
    total: Counter[str] = sum((Counter(outcome) for outcome in outcomes), Counter())
    assert total["ok-free"] == ROOM
    assert total["ok-limited"] == QUOTA
    assert total["capacity"] == 2 * ATTEMPTS - ROOM
    assert total["quota"] == ATTEMPTS - QUOTA
    quota_used, held = asyncio.run(_check(postgres_url))
    assert quota_used == QUOTA * CPU_M
    assert held == ROOM
