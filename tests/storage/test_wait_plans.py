"""The national brain's plans of waiting requests: kept with their nodes, replaced, read but
one request's, and gone once ended, stale or dropped."""

import pytest

from cnbrain.storage import wait_plans
from cnbrain.storage.clock import moment_of
from cnbrain.storage.wait_plans import StoredPlan
from tests.databases import Sessions

pytestmark = pytest.mark.asyncio

NOW = 1_800_000_000
HUB = (("site", "CC-hub", "acc", "Ascend910B"), 16)
LINK = (("link", "CC-BB"), 10_000)


def _plan(request_id: str, start_s: int, end_s: int) -> StoredPlan:
    return StoredPlan(request_id, "east", (HUB, LINK), start_s, end_s)


async def test_plans_are_kept_until_they_end_go_stale_or_are_dropped(sessions: Sessions) -> None:
    async with sessions.begin() as session:
        await wait_plans.save(session, _plan("r-stale", NOW, NOW + 9000), now=moment_of(NOW - 120))
        await wait_plans.save(session, _plan("r-ended", NOW - 900, NOW), now=moment_of(NOW))
        await wait_plans.save(session, _plan("r-late", NOW + 7200, NOW + 9000), now=moment_of(NOW))
        await wait_plans.save(session, _plan("r-soon", NOW + 60, NOW + 3600), now=moment_of(NOW))
        await wait_plans.save(session, _plan("r-soon", NOW + 600, NOW + 4200), now=moment_of(NOW))
    async with sessions.begin() as session:
        found = await wait_plans.live(session, now=moment_of(NOW), fresh_s=60)
    assert found == [
        _plan("r-soon", NOW + 600, NOW + 4200),
        _plan("r-late", NOW + 7200, NOW + 9000),
    ]

    async with sessions.begin() as session:
        mine = await wait_plans.live(session, now=moment_of(NOW), fresh_s=60, exclude="r-late")
        await wait_plans.drop(session, ["r-soon", "r-unknown"])
        await wait_plans.drop(session, [])
    assert [p.request_id for p in mine] == ["r-soon"]
    async with sessions.begin() as session:
        left = await wait_plans.live(session, now=moment_of(NOW), fresh_s=3600)
    assert [p.request_id for p in left] == ["r-late"], "ended and stale plans were deleted"


async def test_a_plan_keeps_the_nodes_of_its_gang(sessions: Sessions) -> None:
    gang = StoredPlan("r-gang", "east", (HUB,), NOW + 60, NOW + 3600, nodes=2)
    async with sessions.begin() as session:
        await wait_plans.save(session, gang, now=moment_of(NOW))
        await wait_plans.save(session, _plan("r-one", NOW + 60, NOW + 600), now=moment_of(NOW))
    async with sessions.begin() as session:
        found = await wait_plans.live(session, now=moment_of(NOW), fresh_s=60)
    assert [(p.request_id, p.nodes) for p in found] == [("r-gang", 2), ("r-one", 1)]
    assert found[0] == gang
