"""Admitting queued requests: one admission round of the region's queue, acted on.

A round (`AdmitQueued.__call__`), run by the one instance that holds the region's admission
lease (`regional.admission_loop`):

1. reads, in one transaction: the queued requests, the priority classes, the region's
   calendar (`ledger_store.calendar_and_holdings`: every held reservation over its window),
   the work holding capacity, the tenants' fair shares (weights, and cohorts with their
   nominal quotas and borrowing limits: `storage.fair_shares`), and the rooms held for
   requests of other regions (`use_cases.make_room`), which the calendar then counts as
   taken until they end or their request holds its part;
2. plans them with the project's one admission code (`scheduling.admission.admission_round`):
   order by class, fair shares and age; conservative backfill over the calendar. Their
   options are built once per request, map and set of the region's links with no capacity
   on the calendar (reported down, say), whose routes avoid those links; an option on a
   site with node pools starts no earlier than the site's nodes hold the request's gang,
   around the gangs planned before it (`node_waits`);
3. acts, each step in its own transaction:
   - requests whose max wait has passed, or that can never fit, are rejected with the reason;
   - requests their cohort refuses wait, with the reason (they were not planned);
   - requests planned to start now are decided by the engine on their planned site only
     (so a backfilled request takes only the gap it was planned in) and reserved with one
     unit of work, moving from queued to placed (event `admitted`); when that unit of work
     is refused (capacity taken meanwhile by a request that started at once, a tenant's
     quota) they are reserved one by one, and those that still do not fit stay queued,
     their plans saying why (the engine's reason on that site, or the ledger's).
     With steering, their paths are steered in the data plane before the unit of work
     commits (and released again when it does not); a request whose path cannot be steered
     stays queued, to be admitted by a later round or rejected once its max wait passes;
   - requests of a class that may preempt and have no start within their max wait get their
     victims requeued (`preempt`: work of lower classes holding what one of their options
     lacks now, compute on its site or bandwidth on a link of its path, each victim's
     reservations released), and are admitted by a later round;
   - every queued request's plan is stored: its position, its estimated start and what
     blocks it on its candidates (`queue_plans`); a request whose estimated start moved gets
     a `planned` event.

Nothing here is admitted twice: a request moves from queued to placed by a conditional
update in the transaction that takes its reservation, so a second round (another instance
whose lease lapsed, say) that plans it too fails that transaction and changes nothing.
A round that stops anywhere (a crash, kill -9) leaves every request queued or placed with
its reservation, never in between.

A request with flows is planned on its flow options (`scheduling.flow_requests`: its
compute held from the start of its staging, each flow over its own window), on the Top-N of
its sites that each round takes afresh against the calendar (`backfill.PlanItem.sites`)
among the sites it has options on, and, once
admitted, holds its reservation with its flows (`ledger_store.reserve_many(..., flows=)`).
Its job starts once its staging is done (`Decision.starts_at`, kept by `jobs.save_starts`).

Requests whose candidates lie outside the region (for a request with flows: a site, or a
flow's route, that is not all the region's own), requests asking for the national optimum,
and those of tenants with a national quota, in a federated brain, are asked of the national
brain while they wait, at most every `ask_every_s` (`escalate_waiting`): it places them at
once, or answers with its plan of their wait (their earliest start on the backbone's
calendar and the regions', or room made by preemption in a destination region), which is
stored as their plan. The national brain plans a request with flows over the calendars of
every owner its flows cross (`national.waiting`).
"""

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import anyio
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.dataplane.steering import SteeringError
from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.domain.events import RequestEvent, RequestEventKind
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.states import RequestState
from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.steered_paths import Steered
from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.ledger.claim import FlowHold, claim_from, duration_seconds
from cnbrain.ledger.held_room import HeldSnapshot
from cnbrain.ledger.keys import ResourceKey
from cnbrain.ledger.nodes import NodeTake
from cnbrain.ledger.reservation import Reservation
from cnbrain.regional.stored_requests import fail_unreadable
from cnbrain.regional.unit_of_work import CapacityChanges
from cnbrain.regional.use_cases.admission_inputs import (
    Queued,
    leave_held_rooms,
    owned,
    readable,
    rooms_left,
    running_work,
    unusable_links,
    waited_out,
)
from cnbrain.regional.use_cases.cohort_quota import reserve_within_cohorts
from cnbrain.regional.use_cases.node_waits import NodeWaits, pools_by_site
from cnbrain.regional.use_cases.outcomes import Outcome, write_outcomes
from cnbrain.regional.use_cases.ports import NationalClient, NationalPlan
from cnbrain.regional.use_cases.preempt import RequeueVictims
from cnbrain.regional.use_cases.queue_view import Blockers, plans_of
from cnbrain.scheduling.admission import Round, Waiting, admission_round
from cnbrain.scheduling.backfill import PlanOption
from cnbrain.scheduling.classes import PriorityClasses
from cnbrain.scheduling.flow_options import FlowOption
from cnbrain.scheduling.flow_requests import flow_holds, flow_plan_options
from cnbrain.scheduling.options import (
    LedgerKeys,
    free_bandwidth_now_on,
    free_now_on,
    ledger_options,
    request_demand,
    sites_capacity,
)
from cnbrain.scheduling.resources import Resources
from cnbrain.scheduling.work import MAX_TIME_S, QueuedWork
from cnbrain.storage import (
    fair_shares,
    jobs,
    ledger_store,
    priority_classes,
    queue_plans,
    request_events,
    requests,
    room_holds,
    tenants,
)
from cnbrain.storage.running_work import HeldWork, elsewhere_usage, held_work

log = logging.getLogger("cnbrain.regional")

SYSTEM = "system"
"""The actor of what the admission loop does."""


@dataclass(frozen=True, slots=True)
class RoundReport:
    """What one round did: how many requests it found waiting, admitted, rejected, asked the
    national brain for, and preempted (victims requeued)."""

    waiting: int = 0
    admitted: int = 0
    rejected: int = 0
    escalated: int = 0
    requeued: int = 0
    placed_elsewhere: int = 0


@dataclass(frozen=True, slots=True)
class _Read:
    """What one round plans from (`AdmitQueued._read`)."""

    stored: list[requests.StoredRequest]
    classes: PriorityClasses
    calendar: Calendar[ResourceKey]
    held: list[HeldWork]
    holdings: list[ledger_store.HeldWindow]
    earlier: dict[str, queue_plans.QueuePlan]
    stopping: set[str]
    terms: fair_shares.AdmissionTerms
    holds: list[room_holds.RoomHold]
    elsewhere: dict[str, Resources]
    """What tenants' cross-region requests of this region hold in other regions."""
    node_waits: NodeWaits
    """When gangs could start on the nodes of the sites with node pools."""


class AdmitQueued:
    """One admission round of this brain's queue (module docstring). `wake_jobs()` tells the
    dispatcher that requests were placed; `preempt` requeues victims (None: no preemption);
    a request only the national brain can place is asked of it at most every
    `ask_every_s`; `steered` (None: the brain steers nothing) steers what it admits."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        live_map: LiveMap,
        changes: CapacityChanges,
        national: NationalClient | None,
        top_n: int,
        wake_jobs: Callable[[], None],
        preempt: RequeueVictims | None = None,
        ask_every_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        steered: Steered | None = None,
    ) -> None:
        self._steered = steered
        self._sessions = sessions
        self._live_map = live_map
        self._changes = changes
        self._national = national
        self._top_n = top_n
        self._wake_jobs = wake_jobs
        self._preempt = preempt
        self._clock = clock
        self._options: dict[str, tuple[PlanOption[ResourceKey], ...]] = {}
        self._flows: dict[str, tuple[FlowOption, ...]] = {}
        """The flow options of the requests with flows, one per option of `_options`."""
        self._options_map: object = None
        self._options_avoid: frozenset[int] = frozenset()
        self._ask_every_s = ask_every_s
        self._asked: dict[str, float] = {}
        self._national_plans: dict[str, NationalPlan] = {}
        """The national brain's last plan of each request only it can place."""
        self._planned = True
        """Whether plans may be stored (the last round stored some, or none ran yet)."""

    async def __call__(self) -> RoundReport:
        """Plan the queue once and act on the plan (module docstring)."""
        now_s = int(self._clock())
        read = await self._read(now_s)
        if read is None:
            return RoundReport()
        queued, unreadable = readable(read.stored, read.classes)
        for record, problem in unreadable:
            await fail_unreadable(self._sessions, record, problem)
        rejected = 0
        local, elsewhere = await self._split(queued, read.calendar)
        leave_held_rooms(read.calendar, read.holds, read.holdings, self._live_map.engine.arrays)
        before = read.calendar.copy()
        options = {
            q.request.id: read.node_waits.options(q.request, self._options[q.request.id])
            for q in local
        }
        result = await self._plan(read, local, options)
        by_id = {q.request.id: q for q in queued}
        rejected += await self._reject(
            [(by_id[n.id].request, waited_out(by_id[n.id])) for n in result.expired]
            + [
                (by_id[n.id].request, f"cannot start in this region whatever it waits: {n.reason}")
                for n in result.impossible
            ]
        )
        admitted, deferred = await self._admit(
            result,
            by_id,
            read.stopping,
            rooms_left(read.holds, read.holdings),
            read.node_waits.planned_nodes,
        )
        requeued = 0
        if self._preempt is not None:
            for preemption in result.preemptions:
                requeued += await self._preempt(
                    preemption.victims,
                    preemptor=preemption.preemptor,
                    reason="preempted by a request of class "
                    f"{by_id[preemption.preemptor].class_name}",
                )
        placed_elsewhere, expired_elsewhere = await self.escalate_waiting(elsewhere, now_s)
        rejected += expired_elsewhere
        links = [link.id for link in self._live_map.engine.arrays.map.links]
        plans, events = plans_of(
            result,
            deferred=deferred,
            elsewhere=elsewhere,
            national_plans=self._national_plans,
            earlier=read.earlier,
            by_id=by_id,
            options={**self._options, **options},
            blockers=Blockers(before, read.holdings, links),
            at=datetime.fromtimestamp(self._clock(), UTC),
            pushed=read.node_waits.pushed,
        )
        await self._store_plans(plans, events)
        return RoundReport(
            waiting=len(read.stored),
            admitted=admitted,
            rejected=rejected,
            escalated=len(elsewhere),
            requeued=requeued,
            placed_elsewhere=placed_elsewhere,
        )

    async def _read(self, now_s: int) -> "_Read | None":
        """What a round plans from, read in one transaction; None when nothing waits (the
        stored plans are then cleared, once)."""
        arrays = self._live_map.engine.arrays
        async with self._sessions() as session, session.begin():
            stored = await requests.pending_requests(session, state=RequestState.QUEUED)
            if not stored:
                if self._planned:
                    await queue_plans.replace_all(session, [])
                    self._planned = False
                return None
            classes = await priority_classes.list_classes(session)
            assert classes is not None, "a prepared database has priority classes"
            ids = [s.id for s in stored]
            calendar, holdings = await ledger_store.calendar_and_holdings(
                session, arrays=arrays, now=now_s
            )
            pools = pools_by_site(arrays)
            ending = await ledger_store.node_takes_ending(session, site_ids=pools.keys())
            return _Read(
                stored=stored,
                classes=classes,
                calendar=calendar,
                held=await held_work(session),
                holdings=holdings,
                earlier=await queue_plans.plans_of(session, ids),
                stopping=await jobs.with_open_attempts(session, ids),
                terms=await fair_shares.admission_terms(session),
                holds=await room_holds.active(session, now=datetime.fromtimestamp(now_s, UTC)),
                elsewhere=await elsewhere_usage(session),
                node_waits=NodeWaits(pools, ending, now=calendar.now),
            )

    async def _plan(
        self,
        read: "_Read",
        local: Sequence[Queued],
        options: dict[str, tuple[PlanOption[ResourceKey], ...]],
    ) -> Round:
        """`admission_round` over the requests this brain places itself, on their `options`
        of this round (by request id), in a worker thread (it is pure, and long for a long
        queue); the calendar read then holds the plan."""
        waiting = [
            Waiting(
                work=QueuedWork(
                    id=q.request.id,
                    tenant=q.request.tenant,
                    class_name=q.class_name,
                    demand=request_demand(q.request),
                    submitted_at=min(q.created_at.timestamp(), MAX_TIME_S),
                ),
                options=options[q.request.id],
                duration=duration_seconds(q.request.duration_hours),
                deadline=q.deadline,
                sites=self._top_n,
            )
            for q in local
        ]
        calendar, terms = read.calendar, read.terms
        running = running_work(read.held, read.classes)
        arrays = self._live_map.engine.arrays
        capacity = sites_capacity(arrays, self._live_map.ownership.sites)
        keys = LedgerKeys(arrays)
        free_now = free_now_on(calendar, keys) if self._preempt else None
        free_bandwidth_now = free_bandwidth_now_on(calendar, keys) if self._preempt else None
        cohort_of = {t: terms.cohorts[name] for t, name in terms.cohort_of.items()}
        return await anyio.to_thread.run_sync(
            lambda: admission_round(
                calendar,
                waiting,
                classes=read.classes,
                capacity=capacity,
                running=running,
                weights=terms.weights,
                free_now=free_now,
                cohort_of=cohort_of,
                free_bandwidth_now=free_bandwidth_now,
                elsewhere=read.elsewhere,
                nodes_freed=read.node_waits.freed,
                nodes=read.node_waits,
            )
        )

    async def _split(
        self, queued: Sequence[Queued], calendar: Calendar[ResourceKey]
    ) -> tuple[list[Queued], list[Queued]]:
        """The queued requests this brain plans itself, and those only the national brain can
        place: with no option on this region's own sites and links (for a request with
        flows, every flow's route too), asking for the national optimum, or of a tenant with
        a national quota. Options are built once per request, map and set of this region's
        links without capacity on `calendar` (`unusable_links`), which their routes avoid,
        in a worker thread."""
        engine = self._live_map.engine
        ownership = self._live_map.ownership
        avoid = unusable_links(calendar, ownership.links)
        if self._options_map is not engine.arrays or self._options_avoid != avoid:
            self._options, self._flows = {}, {}
            self._options_map, self._options_avoid = engine.arrays, avoid
        new = [q.request for q in queued if q.request.id not in self._options]
        if new:
            keys = LedgerKeys(engine.arrays)
            moving = [r for r in new if r.moves_data]
            still = [r for r in new if not r.moves_data]
            built = await anyio.to_thread.run_sync(
                lambda: (
                    ledger_options(engine, still, top_n=self._top_n, keys=keys, avoid=avoid),
                    flow_plan_options(engine, moving, top_n=self._top_n, keys=keys, avoid=avoid),
                )
            )
            for request, options in zip(still, built[0], strict=True):
                self._options[request.id] = tuple(
                    o for o in options if owned(o, ownership.sites, ownership.links)
                )
            for request, pairs in zip(moving, built[1], strict=True):
                kept = [p for p in pairs if owned(p[0], ownership.sites, ownership.links)]
                self._options[request.id] = tuple(option for option, _ in kept)
                self._flows[request.id] = tuple(flow for _, flow in kept)
        alive = {q.request.id for q in queued}
        for gone in [i for i in self._options if i not in alive]:
            del self._options[gone]
            self._flows.pop(gone, None)
        if self._national is None:
            return list(queued), []
        async with self._sessions() as session:
            limited = await tenants.limited_tenants(
                session, (q.request.tenant for q in queued), national=True
            )
        local = [
            q
            for q in queued
            if q.request.tenant not in limited
            and self._options[q.request.id]
            and not q.request.national_optimum
        ]
        ids = {q.request.id for q in local}
        return local, [q for q in queued if q.request.id not in ids]

    async def _reject(self, rejections: Sequence[tuple[PlacementRequest, str]]) -> int:
        """Reject queued requests with their reasons, in one transaction; returns how many."""
        if not rejections:
            return 0
        outcomes = [
            Outcome(r, None, RequestState.REJECTED, reason, SYSTEM) for r, reason in rejections
        ]
        try:
            async with self._sessions.begin() as session:
                await write_outcomes(session, outcomes)
        except requests.InvalidTransition:
            return await self._reject_one_by_one(outcomes)
        return len(outcomes)

    async def _reject_one_by_one(self, outcomes: Sequence[Outcome]) -> int:
        done = 0
        for outcome in outcomes:
            try:
                async with self._sessions.begin() as session:
                    await write_outcomes(session, [outcome])
                done += 1
            except requests.InvalidTransition:  # cancelled meanwhile
                continue
        return done

    async def _admit(
        self,
        result: Round,
        by_id: dict[str, Queued],
        stopping: set[str],
        holds: Sequence[room_holds.RoomHold],
        planned_nodes: Mapping[str, tuple[str, tuple[NodeTake, ...]]],
    ) -> tuple[int, dict[str, str]]:
        """Decide the requests planned to start now, each group on its planned site only, and
        reserve them all with one unit of work; returns how many were admitted, and why each
        of the others was not (by request id). A request whose job's last attempt has not
        ended yet (it was just preempted) waits for it. The decisions leave the room of
        `holds` (the round's, read with its calendar) to their requests while they last. A
        gang takes the nodes the round planned it on (`planned_nodes`: site and node takes,
        by request id) when they still hold it."""
        deferred: dict[str, str] = {}
        if not result.admit:
            return 0, deferred
        engine = self._live_map.engine
        held, _ = await self._live_map.held_snapshot()
        rooms = tuple(room_holds.held_rooms(holds, engine.arrays))
        snapshot = HeldSnapshot(held.free, rooms).seen_by(None, now_s=self._clock())
        site_index = engine.map.site_index
        groups: dict[str, list[PlacementRequest]] = {}
        moving: dict[str, FlowOption] = {}
        for planned in result.admit:
            if planned.id in stopping:
                deferred[planned.id] = "its job's last attempt has not ended yet"
                continue
            request = by_id[planned.id].request
            site = self._options[planned.id][planned.option].label
            groups.setdefault(site, []).append(request)
            if planned.id in self._flows:
                moving[planned.id] = self._flows[planned.id][planned.option]
        decided: list[_Decided] = []
        for site, group in groups.items():
            pinned = snapshot.only_on(site_index[site])

            def decide(
                group: list[PlacementRequest] = group, pinned: Any = pinned
            ) -> list[tuple[PlacementRequest, Any]]:
                return list(
                    zip(
                        group,
                        engine.place_batch(group, reserve=False, snapshot=pinned),
                        strict=True,
                    )
                )

            for request, decision in await anyio.to_thread.run_sync(decide):
                if decision.status is not DecisionStatus.PLACED:
                    deferred[request.id] = why_not_on(decision, site)
                    continue
                reservation = engine.reservation_for(request, decision)
                snapshot = snapshot.adjusted(reservation, taken=True)
                outcome = Outcome.of(request, decision, SYSTEM, reservation)
                decided.append((_admitted(outcome), reservation, moving.get(request.id)))
        if not decided:
            return 0, deferred
        admitted, refused = await self._reserve(decided, planned_nodes)
        if admitted == 0 and len(decided) > 1:
            # One of them may be at fault (its tenant's quota, say): each alone.
            for one in decided:
                alone, refused = await self._reserve([one], planned_nodes)
                admitted += alone
                if not alone:
                    deferred[one[0].request.id] = refused
        elif admitted == 0:
            deferred[decided[0][0].request.id] = refused
        if admitted:
            self._wake_jobs()
        return admitted, deferred

    async def _reserve(
        self,
        decided: Sequence["_Decided"],
        planned_nodes: Mapping[str, tuple[str, tuple[NodeTake, ...]]],
    ) -> tuple[int, str]:
        """Reserve `decided` over their windows from now, held to their tenants' cohort quotas
        again under the ledger's locks (the plan was made on an earlier reading), and write
        them admitted, in one unit of work; returns how many (0: none, the unit of work
        refused; they stay queued) and, when none, why. A request with flows holds its
        compute from now to the end of its run, which starts once its staging is done, and
        each flow over its own window (`flow_holds`). With steering, their paths are steered
        first: when that fails, none is reserved (0), and they stay queued."""
        engine = self._live_map.engine
        now_s = int(self._clock())
        claims = []
        flows: list[FlowHold] = []
        outcomes: list[Outcome] = []
        for o, r, moving in decided:
            lead = 0 if moving is None else moving.lead
            run = duration_seconds(o.request.duration_hours)
            window = Window.of(now_s, lead + run)
            claim = claim_from(r, arrays=engine.arrays, tenant_id=o.request.tenant, window=window)
            site, takes = planned_nodes.get(o.request.id, ("", ()))
            claims.append(replace(claim, node_takes=takes) if site == claim.site_id else claim)
            if moving is not None:
                flows += flow_holds(r.id, moving, start_s=now_s + lead, arrays=engine.arrays)
            outcomes.append(starting(o, now_s + lead) if lead and o.decision else o)
        steering = [o.decision for o in outcomes if o.decision is not None]
        if self._steered is not None and steering:
            try:
                await self._steered.install(steering)
            except SteeringError as failed:
                log.warning("admission of %d requests deferred: %s", len(decided), failed)
                return 0, f"its path could not be steered: {failed}"
        try:
            try:
                async with self._changes.begin() as (session, change):
                    await reserve_within_cohorts(session, claims=claims, flows=flows)
                    await write_outcomes(session, outcomes)
                    await jobs.queue_next_attempts(
                        session,
                        [o.request.id for o, _, _ in decided],
                        message="admitted again after it was preempted",
                    )
                    for _, reservation, _ in decided:
                        change.took(reservation)
            except BaseException:
                if self._steered is not None and steering:
                    await self._steered.release([str(d.reservation_id) for d in steering])
                raise
        except (
            ledger_store.CapacityConflict,
            ledger_store.QuotaExceeded,
            requests.InvalidTransition,
        ) as exc:
            log.info("admission of %d requests deferred to the next round: %s", len(decided), exc)
            self._live_map.capacity_changed()
            return 0, f"its reservation was refused: {exc}"
        return len(decided), ""

    async def escalate_waiting(self, elsewhere: Sequence[Queued], now_s: int) -> tuple[int, int]:
        """Ask the national brain to place each waiting request only it can place (each at most
        once every `ask_every_s`); record the ones it placed, and reject those whose max wait
        has passed. Returns (placed, rejected). An unreachable national brain leaves them
        waiting."""
        alive = {q.request.id for q in elsewhere}
        for gone in [i for i in self._asked if i not in alive]:
            del self._asked[gone]
            self._national_plans.pop(gone, None)
        if not elsewhere or self._national is None:
            return 0, 0
        late = [(q.request, waited_out(q)) for q in elsewhere if q.deadline < now_s]
        rejected = await self._reject(late)
        placed = 0
        for q in elsewhere:
            if q.deadline < now_s or now_s < self._asked.get(q.request.id, 0) + self._ask_every_s:
                continue
            self._asked[q.request.id] = now_s
            try:
                decision, plan = await self._national.escalate_waiting(
                    q.request, wait_until_s=q.deadline
                )
            except Exception as exc:
                log.info("the national brain could not be asked for %s: %s", q.request.id, exc)
                break
            if decision.status is not DecisionStatus.PLACED:
                if plan is not None:
                    self._national_plans[q.request.id] = plan
                continue
            outcome = _admitted(Outcome.of(q.request, decision, SYSTEM))
            try:
                async with self._sessions.begin() as session:
                    await write_outcomes(session, [outcome])
            except requests.InvalidTransition:
                log.warning(
                    "request %s was placed by the national brain after it left the queue",
                    q.request.id,
                )
                continue
            placed += 1
        if placed:
            self._wake_jobs()
        return placed, rejected

    async def _store_plans(
        self, plans: Sequence[queue_plans.QueuePlan], events: Sequence[RequestEvent]
    ) -> None:
        """Store `plans` as the whole plan of the queue, with the events of the requests still
        queued; an outage leaves the plans as they were (the next round writes them)."""
        try:
            async with self._sessions.begin() as session:
                written = await queue_plans.replace_all(session, plans)
                await request_events.append_many(
                    session, [e for e in events if e.request_id in written]
                )
            self._planned = True
        except Exception:
            log.warning("could not store the plans of the queue", exc_info=True)


_Decided = tuple[Outcome, Reservation, FlowOption | None]
"""A request decided on its planned site: its outcome, its reservation, and the flow option
it was planned on (None: it moves no data)."""


ADMITTED_REASON = "admitted from the admission queue"
"""The reason of a request the admission loop placed (it replaces the queue's)."""


def why_not_on(decision: Decision, site: str) -> str:
    """Why the engine did not place a request decided on `site` alone: the rejection that
    names that site (the others have nothing free in such a decision), else its reason."""
    named = re.compile(rf"(?<![\w.-]){re.escape(site)}(?![\w.-])")
    explanation = decision.explanation
    for rejection in explanation.rejections if explanation is not None else ():
        if named.search(rejection.message):
            return f"{rejection.reason} ({rejection.message})"
    return decision.reason or "the engine did not place it"


def starting(outcome: Outcome, start_s: int) -> Outcome:
    """`outcome` with its decision's job starting at epoch second `start_s` (once its data is
    staged on the site)."""
    assert outcome.decision is not None
    start = datetime.fromtimestamp(start_s, UTC)
    return replace(outcome, decision=outcome.decision.model_copy(update={"starts_at": start}))


def _admitted(outcome: Outcome) -> Outcome:
    return Outcome(
        outcome.request,
        outcome.decision,
        outcome.state,
        ADMITTED_REASON,
        outcome.actor,
        kind=RequestEventKind.ADMITTED,
    )
