"""Requests' events on PostgreSQL and SQLite: appended in one statement per batch, read back
oldest first (by time, then as appended), scoped to the request's tenant."""

from datetime import UTC, datetime, timedelta

import pytest
import pytest_asyncio
from sqlalchemy import event, insert

from cnbrain.domain.events import RequestEvent, RequestEventKind
from cnbrain.storage import request_events, requests
from cnbrain.storage.models import RequestEventRecord
from cnbrain.storage.requests import NewRequest
from cnbrain.storage.tenants import create_tenant, create_user
from tests.databases import Sessions

pytestmark = pytest.mark.asyncio

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
K = RequestEventKind


@pytest_asyncio.fixture
async def stored(sessions: Sessions) -> list[str]:
    """Requests r1, r2 of tenant acme and r3 of umbrella, pending."""
    async with sessions.begin() as session:
        for tenant in ("acme", "umbrella"):
            await create_tenant(session, tenant_id=tenant, name=tenant)
            await create_user(
                session, user_id=f"{tenant}-u", name="u", role="tenant-user", tenant_id=tenant
            )
        await requests.insert_requests(
            session,
            [
                NewRequest(request_id=r, tenant_id=t, user_id=f"{t}-u", body={"id": r})
                for r, t in (("r1", "acme"), ("r2", "acme"), ("r3", "umbrella"))
            ],
        )
    return ["r1", "r2", "r3"]


async def test_events_come_back_by_time_then_as_appended(
    sessions: Sessions, stored: list[str]
) -> None:
    later = T0 + timedelta(seconds=5)
    async with sessions.begin() as session:
        await request_events.append_many(
            session,
            [
                RequestEvent.of("r1", K.PLACED, later, site="BJ-dc-1"),
                RequestEvent.of("r2", K.SUBMITTED, T0, by="acme-u"),
                RequestEvent.of("r1", K.JOB_SUBMITTED, later, attempt=1, backend_job_id="71"),
            ],
        )
    async with sessions.begin() as session:
        await request_events.append_many(
            session, [RequestEvent.of("r1", K.SUBMITTED, T0, by="acme-u")]
        )
    async with sessions() as session:
        one = await request_events.events_of(session, request_id="r1", tenant_id="acme")
        two = await request_events.events_of(session, request_id="r2", tenant_id=None)
    assert one == [
        RequestEvent("r1", K.SUBMITTED, T0, {"by": "acme-u"}),
        RequestEvent("r1", K.PLACED, later, {"site": "BJ-dc-1"}),
        RequestEvent("r1", K.JOB_SUBMITTED, later, {"attempt": 1, "backend_job_id": "71"}),
    ]
    assert two == [RequestEvent("r2", K.SUBMITTED, T0, {"by": "acme-u"})]
    assert all(e.at.tzinfo is not None for e in one)


async def test_another_tenants_request_or_none_is_not_found_and_one_without_events_has_none(
    sessions: Sessions, stored: list[str]
) -> None:
    async with sessions.begin() as session:
        await request_events.append_many(session, [RequestEvent.of("r3", K.SUBMITTED, T0)])
    async with sessions() as session:
        assert await request_events.events_of(session, request_id="r3", tenant_id="acme") is None
        assert await request_events.events_of(session, request_id="rx", tenant_id=None) is None
        assert await request_events.events_of(session, request_id="r2", tenant_id="acme") == []
        theirs = await request_events.events_of(session, request_id="r3", tenant_id="umbrella")
    assert theirs == [RequestEvent("r3", K.SUBMITTED, T0)]


async def test_kinds_of_a_later_version_are_left_out(sessions: Sessions, stored: list[str]) -> None:
    async with sessions.begin() as session:
        await session.execute(
            insert(RequestEventRecord),
            [
                {"request_id": "r1", "kind": "teleported", "at": T0, "detail": {}},
                {"request_id": "r1", "kind": "placed", "at": T0, "detail": {"site": "A"}},
            ],
        )
    async with sessions() as session:
        found = await request_events.events_of(session, request_id="r1", tenant_id=None)
    assert found == [RequestEvent("r1", K.PLACED, T0, {"site": "A"})]


async def _statements_of_append_many(sessions: Sessions, events: list[RequestEvent]) -> int:
    seen: list[str] = []

    def count(_connection: object, _cursor: object, statement: str, *_: object) -> None:
        if not statement.startswith("BEGIN"):
            seen.append(statement)

    engine = sessions.kw["bind"].sync_engine
    async with sessions.begin() as session:
        await session.connection()
        event.listen(engine, "before_cursor_execute", count)
        try:
            await request_events.append_many(session, events)
        finally:
            event.remove(engine, "before_cursor_execute", count)
    return len(seen)


async def test_a_batch_of_events_costs_one_statement_and_none_costs_none(
    sessions: Sessions, stored: list[str]
) -> None:
    many = [RequestEvent.of(r, K.SUBMITTED, T0, by="u") for r in stored]
    assert await _statements_of_append_many(sessions, many[:1]) == 1
    assert await _statements_of_append_many(sessions, many) == 1
    assert await _statements_of_append_many(sessions, []) == 0
