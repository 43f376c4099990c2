"""Which links are down, for a brain's re-routing: one interface (`LinkStates`) over every
source the brain believes.

- the data plane (`dataplane.steering.Steering.links_down`: a netlab's veth pair with an end
  down, `cnbrain netlab link down A B`);
- the operators' reports kept in the brain's database (`ReportedLinks`: a link whose last
  report says down, `PUT /v1/links/{link_id}/state`, or for a backbone link the national
  brain's copy of it);

and `AnyDown`, the links that any of them has down: what the brain's steered paths hand to
the re-routing, and what a re-route's new path avoids.
"""

from collections.abc import Collection, Iterable
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.storage import link_states


class LinkStates(Protocol):
    """A source of links' states."""

    async def links_down(self, link_ids: Iterable[str]) -> set[str]:
        """Those of `link_ids` this source has down."""


class ReportedLinks:
    """The links whose operator's last report in the brain's database says down."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def links_down(self, link_ids: Iterable[str]) -> set[str]:
        wanted: Collection[str] = list(link_ids)
        if not wanted:
            return set()
        async with self._sessions() as session:
            return await link_states.down_links(session, wanted)

    async def any_down(self) -> bool:
        """Whether any link's last report says down."""
        async with self._sessions() as session:
            return bool(await link_states.down_links(session))


class AnyDown:
    """The links that any of `sources` has down."""

    def __init__(self, *sources: LinkStates) -> None:
        self._sources = sources

    async def links_down(self, link_ids: Iterable[str]) -> set[str]:
        wanted = list(link_ids)
        down: set[str] = set()
        for source in self._sources:
            down |= await source.links_down(wanted)
        return down
