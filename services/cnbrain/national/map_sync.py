"""The regions' parts of the map reaching the national brain's: each region sends its own
sites and links on its summary stream (`federation.map_delta`); what differs from the
national brain's registry is changed there, in one transaction, and its map rebuilt.

A region sends its part again only when it changes. A part the registry refuses for now (a
site or link retired while the national brain still holds reservations on it, whose release
is on its way) is kept and applied again, at most every `RETRY_REFUSED_S`, at the region's
next summaries (`retry`), until it is applied or the region sends another."""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.map_delta import MapDelta, delta, part_of
from cnbrain.storage import registry
from cnbrain.storage.errors import RegistryError

log = logging.getLogger("cnbrain.national")

MAX_PART_ENTRIES = 100_000
"""Sites and links one region's part may hold at most."""

RETRY_REFUSED_S: Final = 5.0
"""How often a region's part the registry refused is applied again, at most."""


@dataclass(frozen=True, slots=True)
class _Refused:
    """A region's part the registry refused, and when to apply it again (monotonic s)."""

    provinces: frozenset[str]
    sites_json: list[str]
    links_json: list[str]
    due: float


class MapSync:
    """Apply a region's part of the map to the national brain's registry and map."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        live_map: LiveMap,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessions = sessions
        self._live_map = live_map
        self._clock = clock
        self._refused: dict[str, _Refused] = {}

    async def retry(self, region_id: str) -> MapDelta | str | None:
        """Apply again `region_id`'s last part if the registry refused it and it is due
        (module docstring): the change made, why nothing was, or None when there is
        nothing to apply now."""
        refused = self._refused.get(region_id)
        if refused is None or self._clock() < refused.due:
            return None
        return await self.apply(
            region_id, refused.provinces, refused.sites_json, refused.links_json
        )

    async def apply(
        self,
        region_id: str,
        provinces: frozenset[str],
        sites_json: list[str],
        links_json: list[str],
    ) -> MapDelta | str:
        """Make `region_id`'s part of the map (its `provinces`' sites, its links) what it sent;
        the change made, or why nothing was (a part that is not valid, or that would leave
        the map invalid: the map stays as it was). A part the registry refuses is kept to
        apply again (`retry`); any other outcome forgets the region's part kept before."""
        again = self._refused.pop(region_id, None) is not None
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
            if not again:
                log.warning("region %s: its part of the map was refused: %s", region_id, refused)
            due = self._clock() + RETRY_REFUSED_S
            self._refused[region_id] = _Refused(provinces, sites_json, links_json, due)
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
