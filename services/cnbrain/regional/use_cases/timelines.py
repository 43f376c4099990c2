"""The free amount over time of this region's sites and links, for the national brain's plan
of a waiting cross-region request (`GetTimelines`): their profiles on this brain's calendar
(`ledger_store.calendar_and_holdings`), of what this region owns only, less the room held
for other requests (`admission_inputs.leave_held_rooms`), as this brain's admission round
counts it. For a waiting gang, each site named with node pools whose nodes do not hold it
now, for its whole run, says from when they will, as the node takes there end and around
the gangs the national brain planned there for other waiting requests (`node_waits`)."""

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.errors import Invalid
from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.timelines import PlannedGang
from cnbrain.ledger.calendar import Profile
from cnbrain.ledger.keys import (
    SITE_COMPUTE,
    ResourceKey,
    accelerator_key,
    link_key,
    site_key,
)
from cnbrain.ledger.nodes import Gang
from cnbrain.regional.use_cases.admission_inputs import leave_held_rooms
from cnbrain.regional.use_cases.node_waits import NodeWaits, pools_by_site
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
        self,
        site_ids: Sequence[str],
        link_ids: Sequence[str],
        *,
        request_id: str = "",
        gang: Gang | None = None,
        duration_s: int = 1,
        planned: Sequence[PlannedGang] = (),
    ) -> tuple[int, list[tuple[ResourceKey, Profile]], dict[str, int | None]]:
        """The calendar's now and the profile of every resource of the sites of `site_ids`
        and of every link of `link_ids` that this region owns (the others, and ids the map
        does not have, are left out), for the waiting request `request_id` (empty: none):
        the room held for it counts as free, the room held for any other request as taken
        until its hold ends. Third, for `gang` (of a run of `duration_s` seconds), each of
        those sites with node pools whose nodes do not hold it now for its whole run, with
        from when they will (None: not even all free), around the gangs `planned` there.
        Raises Invalid (field `site_ids`, `link_ids` or `request_id`) for more than
        `MAX_SITES` sites or `MAX_LINKS` links, or a request id that is not a name."""
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
            ids = {arrays.map.sites[i].id for i in sites} if gang is not None else set()
            pools = {s: p for s, p in pools_by_site(arrays).items() if s in ids}
            ending = await ledger_store.node_takes_ending(session, site_ids=pools.keys())
        waits = NodeWaits(pools, ending, now=now)
        nodes: dict[str, int | None] = {}
        if gang is not None:
            for one in sorted(planned, key=lambda p: (p.window.start, p.site_id)):
                if one.window.end > now:
                    waits.book(one.site_id, one.gang, one.window)
            for site in sorted(pools):
                at = waits.gang_free_from(site, gang, now, duration_s)
                if at != now:
                    nodes[site] = at
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
        return now, [(key, calendar.profile(key)) for key in keys], nodes
