"""The storage of execution on PostgreSQL: sites' schedulers in the registry, attempts (queue,
claim, leases, take-over), usage records (pages, totals, reports), and migrations 0003 and 0005
both ways with data in the tables.
"""

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.backend_ref import BackendRef
from cnbrain.netmap.files import parse_map_document
from cnbrain.storage import jobs, registry, requests, tenants, usage
from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import (
    create_engine,
    downgrade_schema,
    session_factory,
    upgrade_schema,
)
from cnbrain.storage.models import JobRecord, SiteRecord
from tests.databases import Sessions, create_postgres_database, drop_postgres_database
from tests.tiny_map import tiny_map_raw

pytestmark = pytest.mark.asyncio

SLURM = {"kind": "slurm", "url": "http://127.0.0.1:6820/", "user": "u", "credential": "c"}


@pytest_asyncio.fixture
async def database() -> AsyncIterator[str]:
    url = await create_postgres_database("cnbrain_exec_store")
    try:
        yield url
    finally:
        await drop_postgres_database(url)


@dataclass
class Store:
    sessions: Sessions
    users: dict[str, str]

    def __call__(self) -> AsyncSession:
        return self.sessions()

    def begin(self) -> Any:
        return self.sessions.begin()


@pytest_asyncio.fixture
async def sessions(database: str) -> AsyncIterator[Store]:
    await upgrade_schema(database)
    engine = create_engine(database)
    factory = session_factory(engine)
    raw = tiny_map_raw()
    raw["sites"][0]["execution"] = SLURM  # AA-dc
    async with factory.begin() as session:
        await registry.seed_map(session, document=parse_map_document(raw))
        await tenants.create_tenant(session, tenant_id="acme", name="Acme")
        await tenants.create_tenant(session, tenant_id="umbrella", name="Umbrella")
        user = await tenants.create_user(session, name="u", role="tenant-user", tenant_id="acme")
        other = await tenants.create_user(
            session, name="o", role="tenant-user", tenant_id="umbrella"
        )
    try:
        yield Store(sessions=factory, users={"acme": user.id, "umbrella": other.id})
    finally:
        await engine.dispose()


async def _placed(
    sessions: Store, request_id: str, *, tenant: str = "acme", job: bool = True
) -> None:
    body: dict[str, Any] = {"id": request_id, "tenant": tenant, "job": {"command": "true"}}
    if not job:
        body["job"] = None
    async with sessions.begin() as session:
        await requests.insert_requests(
            session,
            [
                requests.NewRequest(
                    request_id=request_id,
                    tenant_id=tenant,
                    user_id=sessions.users[tenant],
                    body=body,
                )
            ],
        )
        await requests.set_states(
            session, [requests.StateChange(request_id, "placed", site_id="AA-dc")]
        )


async def test_a_sites_scheduler_is_kept_in_its_own_column(sessions: Store) -> None:
    async with sessions() as session:
        document = await registry.load_document(session)
        assert document.sites[0].execution == BackendRef.model_validate(SLURM)
        assert document.sites[1].execution.kind == "simulator"
        assert await registry.site_execution(session, site_id="AA-dc") == BackendRef.model_validate(
            SLURM
        )
        stored = (
            await session.execute(text("SELECT document, execution FROM sites WHERE id = 'AA-dc'"))
        ).one()
        site = await registry.get_site(session, site_id="AA-dc")
        with pytest.raises(registry.UnknownItem):
            await registry.site_execution(session, site_id="nowhere")
    assert "execution" not in stored[0] and stored[1]["kind"] == "slurm"
    assert site is not None and site.execution.kind == "slurm"
    moved = document.sites[0].model_copy(update={"execution": BackendRef(kind="simulator")})
    async with sessions.begin() as session:
        await registry.update_site(session, site=moved)
    async with sessions() as session:
        assert (await registry.site_execution(session, site_id="AA-dc")).kind == "simulator"


async def test_attempts_are_queued_once_and_claimed_by_one_owner(sessions: Store) -> None:
    await _placed(sessions, "r1")
    await _placed(sessions, "r2", job=False)
    async with sessions.begin() as session:
        assert await jobs.queue_first_attempts(session) == 1
        assert await jobs.queue_first_attempts(session) == 0
    until = utcnow() + timedelta(seconds=30)
    async with sessions.begin() as session:
        first = await jobs.claim_queued(session, owner="a", lease_until=until)
    async with sessions.begin() as session:
        second = await jobs.claim_queued(session, owner="b", lease_until=until)
    assert [(j.request_id, j.attempt, j.state, j.owner, j.backend) for j in first] == [
        ("r1", 1, "submitting", "a", "slurm")
    ]
    assert second == []
    key = jobs.JobKey("r1", 1)
    async with sessions.begin() as session:
        assert await jobs.mark_submitted(
            session, key, backend="slurm", backend_job_id="42", message="ok"
        )
        assert not await jobs.mark_submitted(
            session, key, backend="slurm", backend_job_id="43", message="again"
        )
    async with sessions() as session:
        [record] = await jobs.followed(session, owner="a")
        assert (record.state, record.backend_job_id) == ("pending", "42")
        assert await jobs.followed(session, owner="b") == []


async def test_a_lapsed_lease_is_taken_over_and_a_lapsed_submission_is_lost(
    sessions: Store,
) -> None:
    for request_id in ("r1", "r2"):
        await _placed(sessions, request_id)
    past = utcnow() - timedelta(seconds=1)
    async with sessions.begin() as session:
        await jobs.queue_first_attempts(session)
        await jobs.claim_queued(session, owner="a", lease_until=past)
        await jobs.mark_submitted(
            session, jobs.JobKey("r1", 1), backend="slurm", backend_job_id="7", message="ok"
        )
    async with sessions.begin() as session:
        assert await jobs.take_over(session, owner="a", until=utcnow()) == []  # not its own
        lost = await jobs.take_over(session, owner="b", until=utcnow() + timedelta(seconds=30))
    assert [(j.request_id, j.state) for j in lost] == [("r2", "lost")]
    async with sessions() as session:
        [followed] = await jobs.followed(session, owner="b")
        [r2] = await jobs.attempts_of(session, request_id="r2")
    assert followed.request_id == "r1" and followed.lease_until is not None
    assert r2.metered_at is not None and "whether the scheduler took it" in str(r2.message)


def _usage(request_id: str, tenant: str, site: str, ended: datetime, **kw: Any) -> usage.NewUsage:
    fields: dict[str, Any] = {
        "tenant_id": tenant,
        "request_id": request_id,
        "attempt": 1,
        "site_id": site,
        "backend_job_id": "1",
        "started_at": ended - timedelta(hours=1),
        "ended_at": ended,
        "elapsed_s": 3600.0,
        "cpus": 2,
        "memory_mib": 1024,
        "gpus": 0,
        "accelerator_model": None,
        "bandwidth_gbps": 0.0,
        "cpu_core_hours": 2.0,
        "memory_gib_hours": 1.0,
        "accelerator_hours": 0.0,
        "compute_cost_cny": 1.0,
        "network_cost_cny": 0.5,
        "source": "test",
        "simulated": False,
    }
    fields.update(kw)
    return usage.NewUsage(**fields)


async def test_usage_pages_totals_and_reports_by_period_and_tenant(sessions: Store) -> None:
    base = datetime(2030, 1, 1, tzinfo=UTC)
    rows = [
        ("a1", "acme", "AA-dc", base, {}),
        ("a2", "acme", "AA-dc", base + timedelta(days=1), {}),
        ("a3", "acme", "BB-hub", base + timedelta(days=2), {"simulated": True}),
        ("u1", "umbrella", "AA-dc", base + timedelta(days=1), {}),
        ("late", "acme", "AA-dc", base + timedelta(days=40), {}),
    ]
    for request_id, tenant, _, _, _ in rows:
        await _placed(sessions, request_id, tenant=tenant)
    async with sessions.begin() as session:
        await jobs.queue_first_attempts(session)
        for request_id, tenant, site, ended, extra in rows:
            assert await usage.insert(session, _usage(request_id, tenant, site, ended, **extra))
        assert not await usage.insert(session, _usage("a1", "acme", "AA-dc", base))  # once
    start, end = base, base + timedelta(days=30)
    async with sessions() as session:
        first, cursor = await usage.page(session, tenant_id="acme", start=start, end=end, limit=2)
        assert cursor is not None
        rest, last = await usage.page(
            session, tenant_id="acme", start=start, end=end, limit=2, cursor=cursor
        )
        totals = await usage.totals(session, tenant_id="acme", start=start, end=end)
        everyone = await usage.totals(session, tenant_id=None, start=start, end=end)
        report = await usage.report(session, tenant_id=None, start=start, end=end)
        with pytest.raises(usage.BadCursor):
            await usage.page(session, tenant_id="acme", start=start, end=end, cursor="nope")
    assert [r.request_id for r in first + rest] == ["a1", "a2", "a3"] and last is None
    assert (totals.records, totals.cost_cny, totals.cpu_core_hours) == (3, 4.5, 6.0)
    assert everyone.records == 4
    assert [(r.tenant_id, r.site_id, r.simulated, r.records) for r in report] == [
        ("acme", "AA-dc", False, 2),
        ("acme", "BB-hub", True, 1),
        ("umbrella", "AA-dc", False, 1),
    ]


async def test_migration_0003_downgrades_with_data_the_previous_release_can_read(
    database: str, sessions: Store
) -> None:
    await _placed(sessions, "r1")
    async with sessions.begin() as session:
        await jobs.queue_first_attempts(session)
        await session.execute(text("UPDATE placement_requests SET state = 'submitted'"))
        await session.execute(
            update(JobRecord).values(state="pending", backend_job_id="9", submitted_at=utcnow())
        )
    await downgrade_schema(database, revision="0002")
    engine = create_engine(database)
    try:
        async with engine.connect() as connection:
            state, body = (
                await connection.execute(
                    text("SELECT state, body FROM placement_requests WHERE id = 'r1'")
                )
            ).one()
            tables = {
                row[0]
                for row in await connection.execute(
                    text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
                )
            }
            columns = {
                row[0]
                for row in await connection.execute(
                    text(
                        "SELECT column_name FROM information_schema.columns "
                        "WHERE table_name = 'sites'"
                    )
                )
            }
    finally:
        await engine.dispose()
    assert state == "placed" and "job" not in body
    assert "jobs" not in tables and "execution" not in columns
    await upgrade_schema(database)


async def test_migration_0005_names_a_credential_where_a_site_named_a_token_file(
    database: str, sessions: Store
) -> None:
    async def stored() -> dict[str, Any]:
        async with sessions() as session:
            query = text("SELECT execution FROM sites WHERE id = 'AA-dc'")
            execution: dict[str, Any] = (await session.execute(query)).scalar_one()
            return execution

    await downgrade_schema(database, revision="0003")
    assert await stored() == {
        "kind": "slurm",
        "url": "http://127.0.0.1:6820/",
        "user": "u",
        "token_env": "CNBRAIN_CREDENTIAL_C",
    }
    older = {"kind": "slurm", "url": "http://127.0.0.1:6820/", "user": "u", "token_file": "/t"}
    async with sessions.begin() as session:
        await session.execute(
            update(SiteRecord).where(SiteRecord.id == "AA-dc").values(execution=older)
        )
    await upgrade_schema(database)
    assert await stored() == {
        "kind": "slurm",
        "url": "http://127.0.0.1:6820/",
        "user": "u",
        "credential": "migrated",
    }
    async with sessions() as session:
        document = await registry.load_document(session)  # the brain starts on it
    assert document.sites[0].execution.credential == "migrated"
    assert document.sites[1].execution.kind == "simulator"
