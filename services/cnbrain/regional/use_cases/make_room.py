"""Making room on a site of this region for a waiting cross-region request of a higher class
(`MakeRoom`, asked by the national brain when the request has no start within its max wait).

On the first of the sites named that is this region's and where it can: the victims are
chosen by the scheduling core's rule (`scheduling.preemption.choose_victims`) among the work
held on that site, with this region's priority classes (the request's class looked up by its
name; an unknown name is the default class); a room hold is stored for the request
(`storage.room_holds`: its compute on that site for `HOLD_S`), then the victims are
requeued (`use_cases.preempt`). The national brain places the request at once after; the
hold keeps every other request from taking the room back meanwhile: the victims and the
rest of this region's queue (the admission round), requests that start now here (the
snapshot they are decided on), and any reservation or part taken here (the ledger's own
check). It ends when the request takes compute here (its part's prepare deletes it) or
when it lapses.

What it lacks on a site is the compute the site does not have free now, and the bandwidth
(`min_bandwidth_gbps`) that the links of a destination path to the site do not have free
now: the paths from the site's province gateway this brain would offer the national brain
(its `PATHS` best), the first whose lack some set of victims covers. Victims free the
site's compute when they run there and their bandwidth on the links they hold wherever
they run (`RunningWork.frees`). The room held for other requests (their active holds)
counts as taken. On a site with node pools, a gang also lacks the nodes that do not hold it
now: more victims on the site are taken until the nodes they give back hold it
(`preemption.until_enough`, `node_waits`). When the site's compute, its nodes and one of
those paths have room now, nothing is preempted."""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.errors import Invalid
from cnbrain.domain.request import PlacementRequest
from cnbrain.federation.live_map import LiveMap
from cnbrain.netmap.arrays import demand_units, gbps_to_mbps
from cnbrain.regional.use_cases.admission_inputs import leave_held_rooms, running_work
from cnbrain.regional.use_cases.node_waits import NodeWaits, gang_or_none, pools_by_site
from cnbrain.regional.use_cases.preempt import RequeueVictims
from cnbrain.scheduling.options import (
    LedgerKeys,
    free_bandwidth_now_on,
    free_now_on,
    request_demand,
)
from cnbrain.scheduling.preemption import choose_victims, until_enough
from cnbrain.scheduling.resources import Resources
from cnbrain.storage import ledger_store, priority_classes, room_holds
from cnbrain.storage.running_work import held_work

HOLD_S = 30
"""How long the room made is left to the request."""

PATHS = 3
"""Destination paths to a site weighed for their bandwidth (as many as the national brain
asks of a region for each candidate by default)."""

MAX_SITES = 16
"""Sites one call may name."""


@dataclass(frozen=True, slots=True)
class Room:
    """What `MakeRoom` did: how many requests it requeued and on which site (None: none),
    and why (not)."""

    requeued: int
    site_id: str | None
    reason: str


class MakeRoom:
    """Preempt lower-class work on a site of this region for a request of another region's
    queue (module docstring)."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        live_map: LiveMap,
        preempt: RequeueVictims,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sessions = sessions
        self._live_map = live_map
        self._preempt = preempt
        self._clock = clock

    async def __call__(self, request: PlacementRequest, site_ids: Sequence[str]) -> Room:
        """Make room for `request` on the first of `site_ids` where victims of classes below
        its own free what it lacks now. Nothing when it fits on one of them already, when
        none is this region's, or when no set of victims frees enough on any. Raises Invalid
        (field `site_ids`) for more than `MAX_SITES` sites."""
        if len(site_ids) > MAX_SITES:
            raise Invalid(f"at most {MAX_SITES} sites, not {len(site_ids)}", field="site_ids")
        arrays = self._live_map.engine.arrays
        owned = self._live_map.ownership.sites
        index = arrays.map.site_index
        sites = [s for s in dict.fromkeys(site_ids) if s in index and owned[index[s]]]
        if not sites:
            return Room(0, None, "none of the sites named is this region's")
        moment = self._clock()
        now = int(moment)
        async with self._sessions() as session, session.begin():
            classes = await priority_classes.list_classes(session)
            assert classes is not None, "a prepared database has priority classes"
            calendar, holdings = await ledger_store.calendar_and_holdings(
                session, arrays=arrays, now=now
            )
            held = await held_work(session)
            holds = await room_holds.active(session, now=datetime.fromtimestamp(moment, UTC))
            pools = {s: p for s, p in pools_by_site(arrays).items() if s in sites}
            ending = await ledger_store.node_takes_ending(session, site_ids=pools.keys())
        waits = NodeWaits(pools, ending, now=now)
        gang = gang_or_none(request)
        others = [hold for hold in holds if hold.request_id != request.id]
        leave_held_rooms(calendar, others, holdings, arrays)
        preemptor = classes.named_or_default(request.priority_class)
        keys = LedgerKeys(arrays)
        free_now, free_mbps = free_now_on(calendar, keys), free_bandwidth_now_on(calendar, keys)
        demand = request_demand(request)
        mbps = gbps_to_mbps(request.constraints.min_bandwidth_gbps)
        running = running_work(held, classes)
        for site in sites:
            compute = (demand - free_now(site)).positive_part()
            needs = [
                compute + lacking
                for lacking in self._lacking_bandwidth(index[site], mbps, free_mbps)
            ]
            nodes = gang is None or waits.holds(site, gang)
            if nodes and any(need.is_zero() for need in needs):
                return Room(0, None, f"it fits on {site} now")
            victims = None
            for need in needs:
                found = choose_victims(need, preemptor.value, running, now=now, site=site)
                if found is not None and gang is not None and not nodes:
                    found = until_enough(found, running, site, partial(waits.holds, site, gang))
                if found:
                    victims = found
                    break
            if victims:
                await self._hold(request, site, now)
                requeued = await self._preempt(
                    victims,
                    preemptor=request.id,
                    reason=f"preempted by a request of class {preemptor.name}",
                )
                return Room(requeued, site, f"requeued {requeued} of lower classes on {site}")
        return Room(
            0,
            None,
            f"no work of a class below {preemptor.name} on {', '.join(sites)} frees what it lacks",
        )

    def _lacking_bandwidth(
        self, site: int, mbps: int, free_mbps: Callable[[str], int]
    ) -> list[Resources]:
        """For each of the best `PATHS` destination paths to `site`, the bandwidth its links
        lack now for `mbps` (over link dimensions); [nothing] when `mbps` is 0."""
        if not mbps:
            return [Resources()]
        links = self._live_map.map.links
        paths = self._live_map.engine.router.destination_paths(site, k=PATHS, blocked=frozenset())
        return [
            Resources.bandwidth(
                {links[j].id: max(mbps - free_mbps(links[j].id), 0) for j in path.links}
            )
            for path in paths
        ]

    async def _hold(self, request: PlacementRequest, site_id: str, now: int) -> None:
        at = datetime.fromtimestamp(now, UTC)
        units = demand_units(request.resources)
        async with self._sessions.begin() as session:
            await room_holds.hold(
                session,
                room_holds.RoomHold(
                    request_id=request.id,
                    site_id=site_id,
                    cpu_m=units.cpu_m,
                    mem_mib=units.mem_mib,
                    storage_gib=units.storage_gib,
                    accelerator_model=units.accelerator_model,
                    accelerator_milli=units.accelerator_milli,
                    until=at + timedelta(seconds=HOLD_S),
                ),
                now=at,
            )
        self._live_map.capacity_changed()
