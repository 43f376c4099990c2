"""Cross-region requests that wait in their source region's queue: placed now if they fit,
otherwise planned over time, and, when nothing is free within their max wait, given room by
preemption in a destination region.

1. The placer (`national.orchestrator`) tries to place the request now, as for any request.
2. If it cannot, the plan: the request's options are the engine's Top-N sites of the whole
   map with their routes (`scheduling.options.site_options`), each a demand on site compute
   and on every link of its route. When the route matters (the request holds bandwidth on
   it or bounds its latency), each of its segments is asked of its owner, as for flows
   (`national.flow_segments`), so the plan goes around a link its owner reported down.
   Every region that owns some of those resources
   is asked for their timelines (`GetTimelines`, in parallel, under the candidate deadline),
   and, for a site with node pools whose nodes do not hold the request's gang now, from
   when they will (`wait_planner.waiting_for_nodes`); the backbone's links come from the
   national brain's own ledger. On that joint calendar
   (`wait_planner`), with the plans of the other waiting requests taken from it, the
   earliest start within the max wait is the plan. It is kept (`storage.wait_plans`, shared
   by the replicas) for the requests planned next, until the request is placed, its plan
   ends, or its source region stops asking for `wait_plan_ttl_s`.
3. If no option can start within the max wait, the regions of the options' sites, in the
   order of the options, are asked to make room on them (`MakeRoom`: work of lower,
   preemptible classes requeued there, by that region's classes, and the room left to the
   request for a short while) until one does; the placer then tries once more at once.

While other waiting requests have plans, step 1 comes after step 2: the request is placed
now only if its plan, made around theirs, starts now, so a request planned later never takes
the room of one planned before it (conservative backfill over the federation). The placer
chooses the site then, among the request's candidates as for any request.

A request with flows is always planned before it is placed (step 2 before step 1): its
options are the flow options of its best `WAIT_OPTIONS` x `flow_requests.WIDEN` sites on the
empty map (`scheduling.flow_requests`: per site and transfer rate, its compute from the start
of its staging and every flow on its own route and in its own window), each flow's route
made of the segments its owners computed (`national.flow_segments`), planned on the joint
calendar of every owner they cross, around the other plans; its plan is the start the
`scarcity` rule chooses among the earliest starts of the options of the `WAIT_OPTIONS` sites
whose compute scores best on that calendar (`backfill.choose`), not always the earliest.
When its first flow starts now, the placer places it on the plan's site
(`CrossRegionPlacer.place_flows`): every owner holds its share of each flow over the flow's
window, and the decision says when the job starts (`Decision.starts_at`, once its staging
is done). Otherwise its plan is kept, as above. With no start within its max wait, room is
made for it as in step 3, on the sites where its flows could start now
(`wait_planner.room_sites`; on none, no work is preempted for it), and it is planned once
more at once: on the room made, it is placed when its flows' links let its staging start
now; otherwise its plan starts later, and the room lapses.

The source region stores the plan as the request's estimated start and asks again at its
next rounds, until the request is placed or its max wait passes.
"""

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.domain.request import PlacementRequest
from cnbrain.federation.codec import WireError, request_json
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.timelines import planned_gang_messages
from cnbrain.ledger.claim import duration_seconds
from cnbrain.ledger.keys import ResourceKey
from cnbrain.national import planner, wait_planner
from cnbrain.national.flow_segments import FlowSegments, routed_from_access
from cnbrain.national.orchestrator import CrossRegionPlacer
from cnbrain.national.regions import RegionDirectory
from cnbrain.national.settings import NationalSettings
from cnbrain.national.wait_planner import WaitPlan
from cnbrain.scheduling.backfill import PlanOption
from cnbrain.scheduling.flow_requests import flow_sites, site_flow_options
from cnbrain.scheduling.options import AccessRouter, LedgerKeys, ranked_sites, site_options
from cnbrain.storage import ledger_store, wait_plans
from cnbrain.storage.clock import moment_of
from cnbrain.storage.ledger_audit import MAX_IDS
from cnbrain.v1 import regional_pb2

log = logging.getLogger("cnbrain.national")

WAIT_OPTIONS = 8
"""Sites a waiting request is planned on (the engine's best first; for a request with flows,
the best against the joint calendar among `flow_requests.WIDEN` times as many)."""

NO_ROOM_FOR_FLOWS = "no work is preempted for it: on no site could its flows start now"
"""Why no room is made for a request with flows whose flows could not start now anyway."""

MAX_ROOM_SITES = 16
"""Sites one region is asked to make room on at most."""


class PlaceOrPlan:
    """The use case of a waiting cross-region request (module docstring)."""

    def __init__(
        self,
        *,
        settings: NationalSettings,
        sessions: async_sessionmaker[AsyncSession],
        live_map: LiveMap,
        directory: RegionDirectory,
        placer: CrossRegionPlacer,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._sessions = sessions
        self._live_map = live_map
        self._directory = directory
        self._placer = placer
        self._clock = clock
        self._flow_segments = FlowSegments(
            live_map=live_map, directory=directory, deadline_s=settings.candidate_deadline_s
        )

    async def __call__(
        self, request: PlacementRequest, source_region: str, *, wait_until_s: int
    ) -> tuple[Decision, WaitPlan | None]:
        """The placer's decision for `request`, and, when it is a rejection, the plan of its
        wait until epoch second `wait_until_s` (None when placed). While other waiting
        requests have plans, `request` is placed now only if its own plan, made around
        theirs, starts now (module docstring)."""
        if request.moves_data:
            return await self._place_flows(request, source_region, wait_until_s=wait_until_s)
        now = int(self._clock())
        booked = await self._booked(request.id, now)
        if booked:
            planned = await self.plan(request, wait_until_s=wait_until_s, booked=booked)
            start_s = planned[1].start_s
            if start_s is None or start_s > now:
                rejected = planner.rejected(request, planned[1].reason)
                return await self._wait(request, source_region, rejected, planned)
        decision = await self._placer.place(request, source_region)
        if decision.status is DecisionStatus.PLACED:
            await self._forget(request.id)
            return decision, None
        planned = await self.plan(request, wait_until_s=wait_until_s, booked=booked)
        return await self._wait(request, source_region, decision, planned)

    async def _wait(
        self,
        request: PlacementRequest,
        source_region: str,
        decision: Decision,
        planned: tuple[list[PlanOption[ResourceKey]], WaitPlan],
    ) -> tuple[Decision, WaitPlan | None]:
        """What a request that is not placed now gets: its plan, kept for the requests
        planned next; or, with no start within its max wait, room made by preemption in a
        destination region and one more try at placing it (module docstring)."""
        options, plan = planned
        if plan.start_s is not None:
            await self._keep(request, source_region, plan)
            return decision, plan
        await self._forget(request.id)
        if not options:
            return decision, plan
        room = await self._make_room(request, options)
        if room is None:
            return decision, plan
        if room.requeued:
            decision = await self._placer.place(request, source_region)
            if decision.status is DecisionStatus.PLACED:
                return decision, None
        return decision, WaitPlan(None, None, f"{plan.reason}; {room.reason}")

    async def _place_flows(
        self, request: PlacementRequest, source_region: str, *, wait_until_s: int
    ) -> tuple[Decision, WaitPlan | None]:
        """A request with flows, always planned before it is placed, around the other waiting
        requests' plans (module docstring): placed on the site of its plan when its first
        flow starts now, else its plan."""
        earlier = await self._placer.committed(request.id)
        if earlier is not None:
            return earlier, None
        engine = self._live_map.engine
        sites = await asyncio.to_thread(flow_sites, engine, request, top_n=WAIT_OPTIONS)
        asked = await self._flow_segments(request, [site for site, _ in sites])
        pairs = await asyncio.to_thread(
            site_flow_options,
            engine,
            request,
            sites,
            keys=LedgerKeys(engine.arrays),
            router=asked.routes,
        )
        options = [option for option, _ in pairs]
        unheard = asked.unheard
        plan, chosen = await self._plan_flows(
            request, options, wait_until_s=wait_until_s, unheard=unheard
        )
        roomy = [option for option in options if option.label in plan.room_sites]
        if plan.start_s is None and options and not roomy:
            plan = WaitPlan(None, None, f"{plan.reason}; {NO_ROOM_FOR_FLOWS}")
        elif plan.start_s is None and options:
            room = await self._make_room(request, roomy)
            if room is not None and room.requeued:
                plan, chosen = await self._plan_flows(
                    request, options, wait_until_s=wait_until_s, unheard=unheard
                )
            if room is not None and plan.start_s is None:
                plan = WaitPlan(None, None, f"{plan.reason}; {room.reason}")
        if plan.start_s is None or plan.site_id is None or chosen is None:
            await self._forget(request.id)
            return planner.rejected(request, plan.reason), plan
        if plan.start_s - plan.lead_s > int(self._clock()):
            await self._keep(request, source_region, plan)
            return planner.rejected(request, plan.reason), plan
        decision = await self._placer.place_flows(
            request, pairs[chosen][1], site_id=plan.site_id, start_s=plan.start_s
        )
        if decision.status is DecisionStatus.PLACED:
            await self._forget(request.id)
            return decision, None
        return decision, plan

    async def _plan_flows(
        self,
        request: PlacementRequest,
        options: list[PlanOption[ResourceKey]],
        *,
        wait_until_s: int,
        unheard: frozenset[str],
    ) -> tuple[WaitPlan, int | None]:
        """`_planned` around the live plans of the other waiting requests; the regions
        `unheard` gave no segments for its flows' routes."""
        booked = await self._booked(request.id, int(self._clock()))
        return await self._planned(
            request, options, wait_until_s=wait_until_s, booked=booked, unheard=unheard
        )

    async def plan(
        self,
        request: PlacementRequest,
        *,
        wait_until_s: int,
        booked: Sequence[wait_planner.Booked] = (),
    ) -> tuple[list[PlanOption[ResourceKey]], WaitPlan]:
        """The options of `request` and its earliest start on them by `wait_until_s`, where
        the plans `booked` of other waiting requests do not stand (module docstring)."""
        engine = self._live_map.engine
        sites = await asyncio.to_thread(ranked_sites, engine, request, top_n=WAIT_OPTIONS)
        router: AccessRouter = engine.router
        unheard: frozenset[str] = frozenset()
        if routed_from_access(request):
            asked = await self._flow_segments(request, sites)
            router, unheard = asked.routes, asked.unheard
        options = list(
            await asyncio.to_thread(
                site_options, engine, request, sites, keys=LedgerKeys(engine.arrays), router=router
            )
        )
        plan, _ = await self._planned(
            request, options, wait_until_s=wait_until_s, booked=booked, unheard=unheard
        )
        return options, plan

    async def _planned(
        self,
        request: PlacementRequest,
        options: list[PlanOption[ResourceKey]],
        *,
        wait_until_s: int,
        booked: Sequence[wait_planner.Booked],
        unheard: frozenset[str] = frozenset(),
    ) -> tuple[WaitPlan, int | None]:
        """The planned start of `request` on `options` by `wait_until_s`
        (`wait_planner.planned_start`), on the joint calendar of the backbone and the regions
        their resources belong to, where the plans `booked` do not stand; and the index of its
        option in `options` (None: no start). The regions `unheard`, and those that give no
        timelines, are named in the reason."""
        if not options:
            silent = f" (no answer from {', '.join(sorted(unheard))})" if unheard else ""
            return WaitPlan(None, None, f"no site of the federation can ever take it{silent}"), None
        engine = self._live_map.engine
        arrays = engine.arrays
        now = int(self._clock())
        owners = wait_planner.wanted(options, arrays)
        async with self._sessions() as session, session.begin():
            backbone = await ledger_store.calendar_of(session, arrays=arrays, now=now)
        answers, missing = await self._timelines(owners, request, booked)
        missing |= unheard
        try:
            calendar = wait_planner.joint_calendar(
                backbone, answers, options=options, arrays=arrays
            )
            options = wait_planner.waiting_for_nodes(options, answers, arrays)
        except WireError as wrong:
            log.warning("a region's timelines for %s are not valid: %s", request.id, wrong)
            return WaitPlan(None, None, f"a region's calendar was not valid: {wrong}"), None
        wait_planner.book(calendar, booked, arrays)
        duration_s = duration_seconds(request.duration_hours)
        found = wait_planner.planned_start(
            calendar, options, duration_s=duration_s, deadline_s=wait_until_s, sites=WAIT_OPTIONS
        )
        silent = f" (no answer from {', '.join(sorted(missing))})" if missing else ""
        around = f", around {len(booked)} other waiting requests' plans" if booked else ""
        if found is None:
            no_start = f"no candidate site is free for it within its max wait{around}{silent}"
            roomy = wait_planner.room_sites(calendar, options)
            return WaitPlan(None, None, no_start, room_sites=roomy), None
        start, option = found
        lead, span = 0, duration_s
        if option.timed is not None:
            lead = option.timed.lead
            span = max(part.offset + part.duration for part in option.timed.parts)
        return WaitPlan(
            start,
            option.label,
            f"planned by the national brain on {option.label} from epoch second {start}"
            f"{around}{silent}",
            demand=wait_planner.demand_by_id(option.demand, arrays),
            duration_s=span,
            lead_s=lead,
        ), next(i for i, one in enumerate(options) if one is option)

    async def _booked(self, request_id: str, now: int) -> list[wait_plans.StoredPlan]:
        """The live plans of the other waiting requests, earliest first: those whose
        requests their source regions still hold (not ended); the others are dropped. A
        region that does not answer keeps its plans until they lapse."""
        async with self._sessions.begin() as session:
            plans = await wait_plans.live(
                session,
                now=moment_of(now),
                fresh_s=self._settings.wait_plan_ttl_s,
                exclude=request_id,
            )
        by_region: dict[str, list[str]] = {}
        for plan in plans:
            by_region.setdefault(plan.source_region, []).append(plan.request_id)
        ended: list[str] = []
        for region_id, ids in by_region.items():
            for first in range(0, len(ids), MAX_IDS):
                asked = ids[first : first + MAX_IDS]
                try:
                    live = await self._directory.live_requests(
                        region_id, asked, deadline_s=self._settings.candidate_deadline_s
                    )
                except PeerUnavailable as error:
                    log.info("region %s could not say which plans are live: %s", region_id, error)
                    continue
                ended += [one for one in asked if one not in live.live]
        if not ended:
            return plans
        async with self._sessions.begin() as session:
            await wait_plans.drop(session, ended)
        gone = set(ended)
        return [plan for plan in plans if plan.request_id not in gone]

    async def _keep(self, request: PlacementRequest, source_region: str, plan: WaitPlan) -> None:
        """Store `plan` (one with a start) as `request`'s, for the requests planned next."""
        assert plan.start_s is not None
        stored = wait_plans.StoredPlan(
            request_id=request.id,
            source_region=source_region,
            demand=plan.demand,
            start_s=plan.start_s - plan.lead_s,
            end_s=plan.start_s + plan.duration_s,
            nodes=request.resources.nodes,
        )
        async with self._sessions.begin() as session:
            await wait_plans.save(session, stored, now=moment_of(int(self._clock())))

    async def _forget(self, request_id: str) -> None:
        """Drop `request_id`'s plan: it was placed, or nothing holds a start for it."""
        async with self._sessions.begin() as session:
            await wait_plans.drop(session, [request_id])

    async def _timelines(
        self,
        owners: dict[str, wait_planner.Wanted],
        request: PlacementRequest,
        booked: Sequence[wait_planner.Booked],
    ) -> tuple[dict[str, regional_pb2.GetTimelinesResponse], set[str]]:
        """The timelines of every region among `owners` for the waiting `request` (with
        when the nodes of their sites hold its gang, around the gangs of the plans `booked`
        there), and the regions that gave none."""
        plans = [(plan.demand, plan.nodes, plan.start_s, plan.end_s) for plan in booked]
        deadline = self._settings.candidate_deadline_s
        calls: dict[str, asyncio.Future[regional_pb2.GetTimelinesResponse]] = {}
        missing: set[str] = set()
        for owner, one in owners.items():
            if owner == NATIONAL_OWNER:
                continue
            region = self._directory.get(owner)
            if region is None:
                missing.add(owner)
                continue
            calls[owner] = asyncio.ensure_future(
                region.timelines(
                    one.site_ids,
                    one.link_ids,
                    request_id=request.id,
                    request_json=request_json(request),
                    planned_gangs=planned_gang_messages(plans, one.site_ids),
                    deadline_s=deadline,
                )
            )
        answers: dict[str, regional_pb2.GetTimelinesResponse] = {}
        for owner, call in calls.items():
            try:
                answers[owner] = await call
            except PeerUnavailable as error:
                log.info("no timelines from region %s: %s", owner, error)
                missing.add(owner)
        return answers, missing

    async def _make_room(
        self, request: PlacementRequest, options: list[PlanOption[ResourceKey]]
    ) -> regional_pb2.MakeRoomResponse | None:
        """Ask the region of each option's site, in the options' order, to make room on its
        sites among the options, until one requeues some work; its answer, or the last
        region's (None when no region could be asked)."""
        arrays = self._live_map.engine.arrays
        by_region: dict[str, list[str]] = {}
        for label in dict.fromkeys(option.label for option in options):
            region_id = wait_planner.region_of(arrays.map.site_index[label], arrays)
            by_region.setdefault(region_id, []).append(label)
        text = request_json(request)
        last: regional_pb2.MakeRoomResponse | None = None
        for region_id, sites in by_region.items():
            region = self._directory.get(region_id)
            if region is None:
                continue
            try:
                last = await region.make_room(
                    text, sites[:MAX_ROOM_SITES], deadline_s=self._settings.call_deadline_s
                )
            except PeerUnavailable as error:
                log.info("region %s could not make room for %s: %s", region_id, request.id, error)
                continue
            if last.requeued:
                log.info(
                    "region %s requeued %d requests on %s for %s",
                    region_id,
                    last.requeued,
                    last.site_id,
                    request.id,
                )
                return last
        return last
