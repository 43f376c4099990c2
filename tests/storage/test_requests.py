"""Requests: idempotency keys, tenant scoping, state transitions, pagination, decisions."""

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.states import ENDED_REQUEST
from cnbrain.storage import requests
from cnbrain.storage.errors import (
    BadCursor,
    InvalidTransition,
    NotFoundError,
    RequestStoreError,
)
from cnbrain.storage.models import PlacementRequestRecord
from cnbrain.storage.tenants import create_tenant, create_user
from tests.databases import Sessions

pytestmark = pytest.mark.asyncio


async def _tenants(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        for tenant in ("acme", "umbrella"):
            await create_tenant(session, tenant_id=tenant, name=tenant.title())
            await create_user(
                session, user_id=f"{tenant}-user", name="u", role="tenant-user", tenant_id=tenant
            )


async def _insert(
    session: AsyncSession, request_id: str, tenant: str = "acme", key: str | None = None
) -> str | None:
    """Insert one request: None, or the earlier request that holds `key` (see
    `insert_requests`)."""
    new = requests.NewRequest(
        request_id=request_id,
        tenant_id=tenant,
        user_id=f"{tenant}-user",
        body={"id": request_id},
        idempotency_key=key,
    )
    [earlier] = await requests.insert_requests(session, [new])
    return earlier


async def _move(
    session: AsyncSession,
    request_id: str,
    state: str,
    *,
    tenant: str | None = None,
    reason: str | None = None,
    site_id: str | None = None,
) -> None:
    change = requests.StateChange(request_id, state, reason=reason, site_id=site_id)
    await requests.set_states(session, [change], tenant_id=tenant)


async def test_a_duplicate_key_names_the_first_request_and_keeps_the_transaction(
    sessions: Sessions,
) -> None:
    await _tenants(sessions)
    async with sessions.begin() as session:
        assert await _insert(session, "r1", key="k") is None
        assert await _insert(session, "r2", key="k") == "r1"
        assert await _insert(session, "r3", key="other") is None
        assert await _insert(session, "r4", tenant="umbrella", key="k") is None  # per tenant
        first = await requests.get_request(session, tenant_id="acme", request_id="r1")
    assert first is not None and first.state == "pending"
    async with sessions() as session:
        ids = {r.id for r in (await requests.list_requests(session, tenant_id=None))[0]}
        again = await requests.find_by_idempotency_key(
            session, tenant_id="acme", idempotency_key="k"
        )
    assert ids == {"r1", "r3", "r4"}
    assert again is not None and again.id == "r1"
    async with sessions.begin() as session:
        assert await _insert(session, "r5", key="k") == "r1"
        # Another integrity failure needs a rollback; a savepoint keeps the transaction.
        with pytest.raises(RequestStoreError, match="request 'r1' cannot be stored"):
            async with session.begin_nested():
                await _insert(session, "r1")
        with pytest.raises(RequestStoreError, match="request 'r6' cannot be stored"):
            async with session.begin_nested():
                await _insert(session, "r6", tenant="nobody")
        assert await _insert(session, "r7", key="k") == "r1"


async def test_other_tenants_requests_are_not_found(sessions: Sessions) -> None:
    await _tenants(sessions)
    async with sessions.begin() as session:
        await _insert(session, "r1")
        await requests.save_decisions(session, {"r1": {"site": "BJ-dc-1"}})
    async with sessions() as session:
        assert await requests.get_request(session, tenant_id="umbrella", request_id="r1") is None
        assert await requests.get_decision(session, tenant_id="umbrella", request_id="r1") is None
        assert (await requests.list_requests(session, tenant_id="umbrella"))[0] == []
        with pytest.raises(NotFoundError):
            await _move(session, "r1", "placed", tenant="umbrella")
        await _move(session, "r1", "placed", tenant="acme")
        mine = await requests.get_request(session, tenant_id="acme", request_id="r1")
        anyone = await requests.get_request(session, tenant_id=None, request_id="r1")
        decision = await requests.get_decision(session, tenant_id="acme", request_id="r1")
    assert mine is not None and anyone is not None and mine.state == "placed"
    assert decision == {"site": "BJ-dc-1"}


@pytest.mark.parametrize(
    "path",
    [
        ["placed", "running", "completed"],
        ["placed", "running", "failed"],
        ["placed", "running", "cancelled"],
        ["placed", "cancelled"],
        ["placed", "failed"],
        ["rejected"],
        ["failed"],
    ],
)
async def test_allowed_transitions(sessions: Sessions, path: list[str]) -> None:
    await _tenants(sessions)
    async with sessions.begin() as session:
        await _insert(session, "r1")
        for state in path:
            await _move(session, "r1", state, reason=f"now {state}", site_id="BJ-dc-1")
            record = await requests.get_request(session, tenant_id=None, request_id="r1")
            assert record is not None
            assert (record.state, record.reason) == (state, f"now {state}")
        with pytest.raises(InvalidTransition) as raised:
            await _move(session, "r1", "placed")
    assert (raised.value.current, raised.value.target) == (path[-1], "placed")
    assert path[-1] in ENDED_REQUEST


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ([], "running"),
        ([], "completed"),
        ([], "cancelled"),
        (["placed"], "completed"),
        (["placed"], "pending"),
        (["placed", "running"], "placed"),
        (["placed", "running"], "running"),
    ],
)
async def test_forbidden_transitions(sessions: Sessions, path: list[str], bad: str) -> None:
    await _tenants(sessions)
    async with sessions.begin() as session:
        await _insert(session, "r1")
        for state in path:
            await _move(session, "r1", state)
        current = path[-1] if path else "pending"
        with pytest.raises(InvalidTransition, match=f"from '{current}' to '{bad}'"):
            await _move(session, "r1", bad)
        with pytest.raises(ValueError, match="'paused' is not one of"):
            await _move(session, "r1", "paused")
        with pytest.raises(NotFoundError):
            await _move(session, "nope", "placed")


async def test_pages_list_every_request_once_newest_first(sessions: Sessions) -> None:
    await _tenants(sessions)
    base = datetime(2030, 1, 1, tzinfo=UTC)
    async with sessions.begin() as session:
        for i in range(23):
            await _insert(session, f"r{i:02d}")
            # Pairs share a creation time, so pages must break ties by id.
            created = base + timedelta(seconds=i // 2)
            await session.execute(
                update(PlacementRequestRecord)
                .where(PlacementRequestRecord.id == f"r{i:02d}")
                .values(created_at=created)
            )
        await _insert(session, "other", tenant="umbrella")
        for i in range(0, 23, 3):
            await _move(session, f"r{i:02d}", "rejected")
    seen: list[str] = []
    cursor: str | None = None
    async with sessions() as session:
        while True:
            page, cursor = await requests.list_requests(
                session, tenant_id="acme", limit=5, cursor=cursor
            )
            seen += [r.id for r in page]
            if cursor is None:
                break
        rejected, _ = await requests.list_requests(session, tenant_id="acme", state="rejected")
        window, _ = await requests.list_requests(
            session,
            tenant_id="acme",
            created_after=base + timedelta(seconds=2),
            created_before=base + timedelta(seconds=4),
        )
        with pytest.raises(BadCursor):
            await requests.list_requests(session, tenant_id="acme", cursor="garbage")
        with pytest.raises(BadCursor):
            await requests.list_requests(session, tenant_id="acme", cursor="WzEsMiwzXQ")
        with pytest.raises(ValueError, match="limit"):
            await requests.list_requests(session, tenant_id="acme", limit=0)
        pending = await requests.pending_requests(session, tenant_id="acme")
    expected = sorted((f"r{i:02d}" for i in range(23)), key=lambda r: (int(r[1:]) // 2, r))
    assert seen == expected[::-1]
    assert {r.id for r in rejected} == {f"r{i:02d}" for i in range(0, 23, 3)}
    assert [r.id for r in window] == ["r07", "r06", "r05", "r04"]
    assert [r.id for r in pending] == [r for r in expected if int(r[1:]) % 3]


async def test_decisions_are_saved_and_replaced(sessions: Sessions) -> None:
    await _tenants(sessions)
    async with sessions.begin() as session:
        await _insert(session, "r1")
        assert await requests.get_decision(session, request_id="r1") is None
        await requests.save_decisions(session, {"r1": {"status": "quoted"}})
        await requests.save_decisions(session, {"r1": {"status": "placed"}})
    async with sessions() as session:
        assert await requests.get_decision(session, request_id="r1") == {"status": "placed"}
