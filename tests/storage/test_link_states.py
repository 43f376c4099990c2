"""Operators' reports of links' states (`storage.link_states`), on PostgreSQL and SQLite: the
last report of each link counts, and a link is down while its last report says so."""

import pytest

from cnbrain.domain.bounds import MAX_LINK_REASON
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage import link_states
from tests.databases import Sessions

pytestmark = pytest.mark.asyncio


async def test_the_last_report_of_a_link_says_whether_it_is_down(
    sessions: Sessions, seeded: MapArrays
) -> None:
    first, second, third = (link.id for link in seeded.map.links[:3])

    async def report(link: str, state: str, reason: str = "") -> None:
        async with sessions.begin() as session:
            kept = await link_states.report(
                session, link_id=link, state=state, reason=reason, actor="u-1"
            )
        assert (kept.link, kept.state, kept.reason) == (link, state, reason)

    async def down() -> set[str]:
        async with sessions() as session:
            return await link_states.down_links(session, [first, second, third])

    assert await down() == set()
    await report(first, link_states.DOWN, "fibre cut")
    await report(second, link_states.DOWN)
    await report(third, link_states.UP)
    assert await down() == {first, second}
    await report(first, link_states.UP, "mended")
    assert await down() == {second}
    async with sessions() as session:
        assert await link_states.down_links(session, []) == set()
        assert await link_states.down_links(session, [third]) == set()


async def test_a_report_out_of_bounds_is_refused(sessions: Sessions, seeded: MapArrays) -> None:
    link = seeded.map.links[0].id
    for state, reason in (("sideways", ""), (link_states.DOWN, "x" * (MAX_LINK_REASON + 1))):
        with pytest.raises(ValueError, match=r"state|reason"):
            async with sessions.begin() as session:
                await link_states.report(
                    session, link_id=link, state=state, reason=reason, actor="u-1"
                )
