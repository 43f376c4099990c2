"""Notes owed to other brains (`storage.owed_notes`), on PostgreSQL and SQLite: kept until
settled, read oldest first and at most `limit` at a time, the bytes as kept, the time kept
an aware one."""

import pytest

from cnbrain.storage import owed_notes
from cnbrain.storage.clock import utcnow
from tests.databases import Sessions

pytestmark = pytest.mark.asyncio


async def test_notes_are_read_oldest_first_until_settled(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        ids = [
            await owed_notes.owe(
                session, region_id=region, request_id=f"req-{i}", message=bytes([i, 0, 255])
            )
            for i, region in enumerate(["east", "west", "east"])
        ]
    assert ids == sorted(ids) and len(set(ids)) == 3

    async with sessions() as session:
        notes = await owed_notes.owed(session, limit=10)
        first_two = await owed_notes.owed(session, limit=2)
    assert [(n.id, n.region_id, n.request_id, n.message) for n in notes] == [
        (ids[0], "east", "req-0", b"\x00\x00\xff"),
        (ids[1], "west", "req-1", b"\x01\x00\xff"),
        (ids[2], "east", "req-2", b"\x02\x00\xff"),
    ]
    assert first_two == notes[:2]
    assert notes[0].since <= notes[2].since
    # Compared with the clock's aware times: SQLite hands back naive ones.
    assert all(n.since <= utcnow() for n in notes)

    async with sessions.begin() as session:
        await owed_notes.settle(session, [ids[0], ids[2]])
        await owed_notes.settle(session, [])
    async with sessions() as session:
        assert [n.id for n in await owed_notes.owed(session, limit=10)] == [ids[1]]
