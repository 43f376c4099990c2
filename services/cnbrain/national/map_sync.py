"""The regions' parts of the map reaching the national brain's: each region sends its own
sites and links on its summary stream (`federation.map_delta`); what differs from the
national brain's registry is changed there, in one transaction, and its map rebuilt."""

import logging

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.map_delta import MapDelta, delta, part_of
from cnbrain.storage import registry
from cnbrain.storage.errors import RegistryError

log = logging.getLogger("cnbrain.national")

MAX_PART_ENTRIES = 100_000
"""Sites and links one region's part may hold at most."""


class MapSync:
    """Apply a region's part of the map to the national brain's registry and map."""

    def __init__(self, *, sessions: async_sessionmaker[AsyncSession], live_map: LiveMap) -> None:
        self._sessions = sessions
        self._live_map = live_map

    async def apply(
        self,
        region_id: str,
        provinces: frozenset[str],
        sites_json: list[str],
        links_json: list[str],
    ) -> MapDelta | str:
        """Make `region_id`'s part of the map (its `provinces`' sites, its links) what it sent;
        the change made, or why nothing was (a part that is not valid, or that would leave
        the map invalid: the map stays as it was)."""
        if len(sites_json) + len(links_json) > MAX_PART_ENTRIES:
            return f"a part of more than {MAX_PART_ENTRIES} sites and links"
        try:
            part = part_of(region_id, provinces, sites_json, links_json)
        except (ValidationError, ValueError) as wrong:
            return f"the part is not valid: {wrong}"
        change = delta(self._live_map.map, region_id, part)
        if change.is_empty():
            return change
        # Another replica of the national brain may have stored this part already.
        await self._live_map.reload()
        change = delta(self._live_map.map, region_id, part)
        if change.is_empty():
            return change
        try:
            async with self._sessions.begin() as session:
                await _write(session, change)
        except RegistryError as refused:
            log.warning("region %s: its part of the map was refused: %s", region_id, refused)
            await self._live_map.reload()  # what another replica stored meanwhile, if any
            return f"the change was refused: {refused}"
        await self._live_map.reload()
        log.info("region %s: map changed: %s", region_id, change.summary())
        return change


async def _write(session: AsyncSession, change: MapDelta) -> None:
    for site_id in change.retired_sites:
        await registry.retire_site(session, site_id=site_id)
    for link_id in change.retired_links:
        await registry.retire_link(session, link_id=link_id)
    for link in change.changed_links:
        await registry.update_link(session, link=link)
    for site, links in change.new_sites:
        await registry.register_site(session, site=site, links=links)
    for site in change.changed_sites:
        await registry.update_site(session, site=site)
    for link in change.new_links:
        await registry.register_link(session, link=link)
