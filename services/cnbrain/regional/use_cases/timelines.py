"""The free amount over time of this region's sites and links, for the national brain's plan
of a waiting cross-region request (`GetTimelines`): their profiles on this brain's calendar
(`ledger_store.calendar_and_holdings`), of what this region owns only, less the room held
for other requests (`admission_inputs.leave_held_rooms`), as this brain's admission round
counts it."""

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.errors import Invalid
from cnbrain.federation.live_map import LiveMap
from cnbrain.ledger.calendar import Profile
from cnbrain.ledger.keys import (
    SITE_COMPUTE,
    ResourceKey,
    accelerator_key,
    link_key,
    site_key,
)
from cnbrain.regional.use_cases.admission_inputs import leave_held_rooms
from cnbrain.scheduling.checks import checked_name
from cnbrain.storage import ledger_store, room_holds

MAX_SITES = 64
"""Sites one call may name."""

MAX_LINKS = 256
"""Links one call may name."""


class ReadTimelines:
    """The timelines of one call, read in one transaction."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        live_map: LiveMap,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sessions = sessions
        self._live_map = live_map
        self._clock = clock

    async def __call__(
        self, site_ids: Sequence[str], link_ids: Sequence[str], *, request_id: str = ""
    ) -> tuple[int, list[tuple[ResourceKey, Profile]]]:
        """The calendar's now and the profile of every resource of the sites of `site_ids`
        and of every link of `link_ids` that this region owns (the others, and ids the map
        does not have, are left out), for the waiting request `request_id` (empty: none):
        the room held for it counts as free, the room held for any other request as taken
        until its hold ends. Raises Invalid (field `site_ids`, `link_ids` or `request_id`)
        for more than `MAX_SITES` sites or `MAX_LINKS` links, or a request id that is not a
        name."""
        if request_id:
            checked_name(request_id, field="request_id")
        if len(site_ids) > MAX_SITES:
            raise Invalid(f"at most {MAX_SITES} sites, not {len(site_ids)}", field="site_ids")
        if len(link_ids) > MAX_LINKS:
            raise Invalid(f"at most {MAX_LINKS} links, not {len(link_ids)}", field="link_ids")
        arrays = self._live_map.engine.arrays
        ownership = self._live_map.ownership
        sites = {
            i
            for i in (arrays.map.site_index.get(s) for s in site_ids)
            if i is not None and ownership.sites[i]
        }
        links = [
            link_key(j)
            for j in dict.fromkeys(arrays.link_index.get(link) for link in link_ids)
            if j is not None and ownership.links[j]
        ]
        now = int(self._clock())
        async with self._sessions() as session, session.begin():
            calendar, holdings = await ledger_store.calendar_and_holdings(
                session, arrays=arrays, now=now
            )
            holds = await room_holds.active(session, now=datetime.fromtimestamp(now, UTC))
        others = [hold for hold in holds if hold.request_id != request_id]
        leave_held_rooms(calendar, others, holdings, arrays)
        keys: list[ResourceKey] = [
            key
            for i in sorted(sites)
            for key in (
                *(site_key(i, resource) for resource in SITE_COMPUTE),
                *(accelerator_key(i, model) for model in arrays.accelerator_column),
            )
            if key in calendar
        ]
        keys += [key for key in links if key in calendar]
        return now, [(key, calendar.profile(key)) for key in keys]
