"""The national brain's backlog of owed releases: a release that keeps a completed job's
deliveries, owed to an owner that was down, is made with them kept by a national brain that
started afresh on the same database."""

import pytest

from cnbrain.national.coordinator import Coordinator, Participant
from cnbrain.national.release_backlog import DatabaseBacklog
from tests.databases import Sessions
from tests.national.test_national_coordinator import Ledger, retry_until

pytestmark = pytest.mark.asyncio


async def test_an_owed_release_keeps_the_deliveries_across_a_restart(sessions: Sessions) -> None:
    backlog = DatabaseBacklog(sessions)
    east = Ledger("east")
    participants: dict[str, Participant] = {"east": east}
    east.down = True
    first = Coordinator(participants.get, ttl_ms=1_000, backlog=backlog)
    assert not await first.release("east", ["r0"], "completed", keep_delivery=True)
    assert not await first.release("east", ["r1"], "cancelled")
    assert sorted(await backlog.owed()) == [
        ("east", "r0", "completed", True),
        ("east", "r1", "cancelled", False),
    ]

    east.down = False
    east.kept.clear()
    restarted = Coordinator(participants.get, ttl_ms=1_000, backlog=backlog)

    async def paid() -> bool:
        return not await backlog.owed()

    await retry_until(restarted, paid, tries=200)

    retried = [tuple(ids) for step, ids in east.calls if step == "release"][2:]
    made = dict(zip(retried, east.kept, strict=True))
    assert made == {("r0",): True, ("r1",): False}
    assert await backlog.owed() == []
