"""Cross-region placement: candidates from the regions, segments from their owners, the joint
choice, and a two-phase reservation in every owner, for batches of requests.

Requests that arrive while a batch is being worked on wait and go together as the next batch
(group commit). One attempt for a batch: ask every region some request of the batch chose
for candidate sites (with destination segments) and every source region for source segments,
one call per region carrying all the batch's requests for it, in parallel and under a
deadline; compose the view and the routes of what they answered (`planner`); let the
placement engine (filters, scores, Top-N, CP-SAT) choose site and route for the whole batch
on that one view, so two requests never take the same capacity; split each decision into
its owners' parts (`planner.parts`) and reserve them in two phases (`coordinator`).

A request whose part failed is tried again on its own, without the region that failed (up to
`placement_attempts` in all), then rejected with every reason. Parts a crashed brain prepared
expire there by themselves.

A request with flows is planned over time by `national.waiting`, which then places it on the
site of its plan with `place_flows`: one engine decision pinned to that site, and its parts
with the flows' windows, reserved as above.

A quote takes the same ask and decide steps (`_choose`, shared with every attempt) for one
request alone, outside the batches, and stops before the reservation: it prepares, commits and
stores nothing.
"""

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.domain.request import PlacementRequest
from cnbrain.federation.codec import PathReader, WireError, pool_summaries, request_json
from cnbrain.federation.live_map import LiveMap
from cnbrain.group_commit import GroupCommit
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.claim import duration_seconds
from cnbrain.ledger.nodes import PoolSummary
from cnbrain.ledger.snapshot import site_pools
from cnbrain.national import flow_parts, planner
from cnbrain.national.coordinator import Commitment, Coordinator
from cnbrain.national.planner import Answers, AttemptError, Plan
from cnbrain.national.regions import Region, RegionDirectory
from cnbrain.national.settings import NationalSettings
from cnbrain.routing.composed import ComposedRouter
from cnbrain.routing.paths import GraphPath
from cnbrain.scheduling.flow_options import FlowOption
from cnbrain.scheduling.flow_requests import flow_holds
from cnbrain.telemetry.spans import span
from cnbrain.v1 import regional_pb2

BATCH_CAP = 64
"""Requests placed together at most."""


class Held(Protocol):
    """What the placer reads of the national brain's own ledger."""

    async def held_decisions(self, request_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The committed decision of every request of `request_ids` it holds one of."""

    async def owners_of(self, reservation_id: str) -> list[str] | None:
        """The owners of the parts of a reservation it holds (prepared or committed);
        None when it holds none."""

    async def nationally_limited(self, tenant_ids: Iterable[str]) -> set[str]:
        """Those of `tenant_ids` that have a national quota, which its parts count."""


@dataclass(slots=True)
class Pending:
    """A request being placed: its wire form (encoded once), the regions left out of its
    next attempt, and the notes its attempts collected."""

    request: PlacementRequest
    source_region: str
    text: str
    excluded: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


AttemptResult = Decision | AttemptError


class CrossRegionPlacer:
    """The cross-region placement use case: each request's attempts, the regions' answers,
    the engine's joint choice, and its reservation through `coordinator`; and the quote of a
    request, the same choice without the reservation. `placed` is told the status of every
    placement's answer, `placed` or `rejected` (None: nobody is)."""

    def __init__(
        self,
        *,
        settings: NationalSettings,
        live_map: LiveMap,
        directory: RegionDirectory,
        coordinator: Coordinator,
        held: Held,
        placed: Callable[[str], None] | None = None,
    ) -> None:
        self._placed = placed
        self._settings = settings
        self._live_map = live_map
        self._directory = directory
        self._plan_lock = asyncio.Lock()
        self._coordinator = coordinator
        self._held = held
        self._inflight: dict[str, asyncio.Future[Decision]] = {}
        self._batches: GroupCommit[Pending, Decision] = GroupCommit(
            self._first_attempts, cap=BATCH_CAP
        )

    @property
    def batches(self) -> GroupCommit[Pending, Decision]:
        """The group commit of first attempts (its counters give the mean batch size)."""
        return self._batches

    async def place(self, request: PlacementRequest, source_region: str) -> Decision:
        """A placed decision whose reservation is committed in every owner, or a rejection
        with its reason. Concurrent and repeated calls for one request id share one answer."""
        running = self._inflight.get(request.id)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._inflight[request.id] = future
        try:
            decision = await self._place(request, source_region)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here, so an unawaited future logs nothing
            raise
        else:
            future.set_result(decision)
        finally:
            del self._inflight[request.id]
        if self._placed is not None:  # the answer is given: what this raises is its own
            self._placed(decision.status)
        return decision

    async def release(
        self, reservation_id: str, reason: str, *, keep_delivery: bool = False
    ) -> bool:
        """Release every part of a committed cross-region reservation (with `keep_delivery`,
        but the delivery flows, which hold until their windows end); False when the national
        brain holds no such reservation."""
        owners = await self._held.owners_of(reservation_id)
        if owners is None:
            return False
        await asyncio.gather(
            *(
                self._coordinator.release(
                    owner, [reservation_id], reason, keep_delivery=keep_delivery
                )
                for owner in owners
            )
        )
        return True

    async def committed(self, request_id: str) -> Decision | None:
        """The decision committed earlier for `request_id`, or None."""
        earlier = await self._held.held_decisions([request_id])
        found = earlier.get(request_id)
        return None if found is None else Decision.model_validate(found)

    async def place_flows(
        self, request: PlacementRequest, flow: FlowOption, *, site_id: str, start_s: int
    ) -> Decision:
        """Place `request` (one with flows) on `site_id`, its job starting at epoch second
        `start_s`, once its staging is done, and reserve in two phases: its compute and
        continuous bandwidth (on the engine's path to the site, as for any request) from the
        start of its staging to the end of its run, and every flow of `flow` over its own
        window, each owner holding the links of a flow it owns (`flow_parts.with_flows`).
        The committed decision (with `starts_at`), or the rejection with why a part was
        refused."""
        engine = self._live_map.engine
        arrays = engine.arrays
        backbone, _ = await self._live_map.snapshot()
        pinned = backbone.only_on(arrays.map.site_index[site_id])
        async with self._plan_lock:
            [decision] = await asyncio.to_thread(
                engine.place_batch, [request], reserve=False, snapshot=pinned
            )
        if decision.status is DecisionStatus.REJECTED:
            return planner.rejected(request, decision.reason or f"{site_id} cannot take it")
        reservation = engine.reservation_for(request, decision)
        held_from = start_s - flow.lead
        limited = await self._held.nationally_limited([request.tenant])
        parts = flow_parts.with_flows(
            planner.parts(
                request,
                decision,
                reservation,
                arrays,
                start_s=held_from,
                national_quota=request.tenant in limited,
            ),
            flow_holds(reservation.id, flow, start_s=start_s, arrays=arrays),
            arrays,
            window=Window(held_from, start_s + duration_seconds(request.duration_hours)),
        )
        decision = flow_parts.annotated(
            decision,
            reservation_id=reservation.id,
            owners=[part.owner for part in parts],
            starts_at=datetime.fromtimestamp(start_s, UTC),
        )
        plan = Plan(item=0, decision=decision, reservation=reservation, parts=parts)
        failed = await self._coordinator.prepare([plan])
        if not failed:
            commitment = _commitment(plan, request, request_json(request))
            failed = await self._coordinator.commit([plan], {plan.item: commitment})
        if failed:
            return planner.rejected(request, str(failed[0]))
        return decision

    async def _place(self, request: PlacementRequest, source_region: str) -> Decision:
        """The first attempt goes with whatever batch is next; every further one alone."""
        item = Pending(request=request, source_region=source_region, text=request_json(request))
        try:
            return await self._batches.submit(item)
        except AttemptError as failure:
            error = failure
        for _ in range(self._settings.placement_attempts - 1):
            item.notes.append(str(error))
            if error.region is None or error.region == source_region:
                break
            item.excluded.add(error.region)
            outcome = (await self._attempt([item]))[0]
            if isinstance(outcome, Decision):
                return outcome
            error = outcome
        else:
            item.notes.append(str(error))
        return planner.rejected(request, "; ".join(item.notes) or "no region could place it")

    async def _first_attempts(self, items: list[Pending]) -> list[Decision | BaseException]:
        """The batch's answers: the decision committed earlier for a request id, or the
        outcome of its first attempt (an AttemptError goes to its caller to try again)."""
        earlier = await self._held.held_decisions([item.request.id for item in items])
        fresh = [i for i, item in enumerate(items) if item.request.id not in earlier]
        outcomes = iter(await self._attempt([items[i] for i in fresh]) if fresh else [])
        return [
            Decision.model_validate(earlier[item.request.id])
            if item.request.id in earlier
            else next(outcomes)
            for item in items
        ]

    async def quote(self, request: PlacementRequest, source_region: str) -> Decision:
        """The decision `place` would make for `request` now, from the same steps (the
        regions' candidates and segments, the engine's choice) as a first attempt alone;
        nothing is prepared, committed or stored in any owner. Placed without a reservation
        id, or rejected with its reason."""
        item = Pending(request=request, source_region=source_region, text=request_json(request))
        choice, timings_ms = await self._choose([item])
        [outcome] = choice
        if isinstance(outcome, AttemptError):
            return planner.rejected(request, "; ".join([*item.notes, str(outcome)]))
        decision, answers = outcome
        if decision.status is DecisionStatus.REJECTED:
            return planner.engine_rejected(decision, item.notes)
        return planner.quoted(decision, regions=answers.regions, timings_ms=timings_ms)

    async def _attempt(self, items: Sequence[Pending]) -> list[AttemptResult]:
        """One attempt for every item: its placed decision, committed in every owner; its
        rejection; or the AttemptError that ended it (all its parts released)."""
        engine = self._live_map.engine
        choice, timings_ms = await self._choose(items)
        started = time.perf_counter()
        outcomes: list[AttemptResult | None] = [None] * len(items)
        chosen: dict[int, Answers] = {}
        plans: list[Plan] = []
        start_s = int(time.time())  # every reservation of the attempt holds from now
        limited = await self._held.nationally_limited(item.request.tenant for item in items)
        for i, outcome in enumerate(choice):
            item = items[i]
            if isinstance(outcome, AttemptError):
                outcomes[i] = outcome
                continue
            decision, chosen[i] = outcome
            if decision.status is DecisionStatus.REJECTED:
                outcomes[i] = planner.engine_rejected(decision, item.notes)
                continue
            reservation = engine.reservation_for(item.request, decision)
            parts = planner.parts(
                item.request,
                decision,
                reservation,
                engine.arrays,
                start_s=start_s,
                national_quota=item.request.tenant in limited,
            )
            plans.append(Plan(item=i, decision=decision, reservation=reservation, parts=parts))
        for i, refused in (await self._coordinator.prepare(plans)).items():
            outcomes[i] = refused
        prepared = time.perf_counter()
        plans = [plan for plan in plans if outcomes[plan.item] is None]
        for plan in plans:
            plan.decision = planner.annotated(
                plan.decision,
                reservation_id=plan.reservation.id,
                regions=chosen[plan.item].regions,
                batch=len(items),
                timings_ms={**timings_ms, "federation_prepare": (prepared - started) * 1000},
            )
        failed = await self._coordinator.commit(plans, _commitments(items, plans))
        for plan in plans:
            outcomes[plan.item] = failed.get(plan.item, plan.decision)
        assert all(outcome is not None for outcome in outcomes)
        return [outcome for outcome in outcomes if outcome is not None]

    async def _choose(
        self, items: Sequence[Pending]
    ) -> tuple[list[tuple[Decision, Answers] | AttemptError], dict[str, float]]:
        """The ask and decide steps of one attempt for every item, shared by placements and
        quotes: the regions chosen for it are asked for candidates and segments, and the
        engine decides all items that got answers together on one composed view. Per item,
        the engine's decision (placed or rejected, nothing reserved) with the answers it was
        made on, or the AttemptError that ended it before a decision; and the timings of the
        two steps (`federation_ask`, `federation_decide`, ms)."""
        outcomes: list[tuple[Decision, Answers] | AttemptError | None] = [None] * len(items)
        chosen: dict[int, tuple[Region, list[Region]]] = {}
        for i, item in enumerate(items):
            source = self._directory.get(item.source_region)
            if source is None:
                outcomes[i] = AttemptError(f"region {item.source_region!r} is not registered")
                continue
            regions = self._directory.choose(
                item.request, self._settings.top_regions, exclude=item.excluded
            )
            if not regions:
                outcomes[i] = AttemptError("no registered region has free capacity for the request")
                continue
            chosen[i] = (source, regions)
        started = time.perf_counter()
        with span("federation.ask", {"cnbrain.requests": len(chosen)}):
            answers = await self._ask(items, chosen)
        asked = time.perf_counter()
        deciding: list[tuple[int, Answers]] = []
        for i, answer in answers.items():
            if isinstance(answer, AttemptError):
                outcomes[i] = answer
            else:
                deciding.append((i, answer))
        decisions = await self._decide(
            [items[i].request for i, _ in deciding], [answer for _, answer in deciding]
        )
        decided = time.perf_counter()
        for (i, answer), decision in zip(deciding, decisions, strict=True):
            outcomes[i] = (decision, answer)
        timings_ms = {
            "federation_ask": (asked - started) * 1000,
            "federation_decide": (decided - asked) * 1000,
        }
        assert all(outcome is not None for outcome in outcomes)
        return [outcome for outcome in outcomes if outcome is not None], timings_ms

    async def _ask(
        self, items: Sequence[Pending], chosen: Mapping[int, tuple[Region, list[Region]]]
    ) -> dict[int, Answers | AttemptError]:
        """One GetSourceSegments per source region and one GetCandidates per region asked,
        each for all the items concerned, in parallel; each item's answers (or why not)."""
        settings = self._settings
        timeout = settings.candidate_deadline_s
        sources: dict[str, tuple[Region, list[int]]] = {}
        asked: dict[str, tuple[Region, list[int]]] = {}
        for i, (source, regions) in chosen.items():
            sources.setdefault(source.id, (source, []))[1].append(i)
            for region in regions:
                asked.setdefault(region.id, (region, []))[1].append(i)
        source_calls = [
            region.source_segments(
                [items[i].text for i in indices],
                paths=settings.paths_per_segment,
                deadline_s=timeout,
            )
            for region, indices in sources.values()
        ]
        candidate_calls = [
            region.candidates(
                [items[i].text for i in indices],
                sites=settings.sites_per_region,
                paths=settings.paths_per_segment,
                deadline_s=timeout,
            )
            for region, indices in asked.values()
        ]
        replies = await asyncio.gather(*source_calls, *candidate_calls, return_exceptions=True)
        source_replies = dict(zip(sources, replies[: len(sources)], strict=True))
        candidate_replies = dict(zip(asked, replies[len(sources) :], strict=True))
        found: dict[int, Answers | AttemptError] = {}
        reader = PathReader(self._live_map.engine.arrays)
        for region_id, (region, indices) in sources.items():
            reply = source_replies[region_id]
            for position, i in enumerate(indices):
                try:
                    found[i] = self._source_answer(region, reply, position, len(indices), reader)
                except AttemptError as failure:
                    found[i] = failure
        for region_id, (region, indices) in asked.items():
            reply = candidate_replies[region_id]
            for position, i in enumerate(indices):
                answer = found[i]
                if isinstance(answer, AttemptError):
                    continue
                answer.regions.append(region_id)
                note = self._take_candidates(region, reply, position, len(indices), answer, reader)
                if note:
                    items[i].notes.append(f"region {region_id!r}: {note}")
        return found

    def _source_answer(
        self, source: Region, reply: object, position: int, count: int, reader: PathReader
    ) -> Answers:
        """One item's source segments from `reply` (the source region's answer, or the
        exception of its call); AttemptError naming the source region when there are none."""
        if isinstance(reply, BaseException):
            raise AttemptError(
                f"source region {source.id!r}: {planner.reason_of(reply)}", region=source.id
            )
        assert isinstance(reply, regional_pb2.GetSourceSegmentsResponse)
        if len(reply.answers) != count:
            raise AttemptError(
                f"source region {source.id!r}: {len(reply.answers)} answers for {count} requests",
                region=source.id,
            )
        entry = reply.answers[position]
        if entry.error:
            raise AttemptError(f"source region {source.id!r}: {entry.error}", region=source.id)
        answers = Answers(
            access_node=entry.access_node,
            source=[],
            destinations={},
            free={},
            residual={},
            regions=[],
        )
        try:
            for path in entry.paths:
                read = reader.read(path, owner=source.id)
                answers.source.append(read)
                answers.residual.update(zip(read.links, path.free_mbps, strict=True))
        except WireError as wrong:
            raise AttemptError(f"source region {source.id!r}: {wrong}", region=source.id) from None
        if not answers.source:
            raise AttemptError(
                f"source region {source.id!r} has no path to its gateway with the bandwidth"
            )
        return answers

    def _take_candidates(
        self,
        region: Region,
        reply: object,
        position: int,
        count: int,
        answers: Answers,
        reader: PathReader,
    ) -> str | None:
        """Add one item's candidates from `reply` (the region's answer, or the exception of
        its call) to `answers`; a note when the region offered none or answered wrongly."""
        if isinstance(reply, BaseException):
            return planner.reason_of(reply)
        assert isinstance(reply, regional_pb2.GetCandidatesResponse)
        if len(reply.answers) != count:
            return f"{len(reply.answers)} answers for {count} requests"
        entry = reply.answers[position]
        arrays = self._live_map.engine.arrays
        destinations: dict[int, list[GraphPath]] = {}
        free: dict[int, planner.FreeCompute] = {}
        nodes: dict[int, tuple[PoolSummary, ...]] = {}
        pools = site_pools(arrays)
        residual: dict[int, int] = {}
        try:
            for candidate in entry.candidates:
                site = arrays.map.site_index.get(candidate.site_id)
                if site is None or arrays.map.sites[site].province not in region.provinces:
                    raise WireError(f"site {candidate.site_id!r} is not one of the region's")
                paths = []
                for path in candidate.paths:
                    if not path.nodes or path.nodes[-1] != candidate.site_id:
                        raise WireError(f"a destination path does not end at {candidate.site_id!r}")
                    read = reader.read(path, owner=region.id)
                    paths.append(read)
                    residual.update(zip(read.links, path.free_mbps, strict=True))
                if paths:
                    destinations[site] = paths
                    free[site] = candidate.free
                    summaries = pool_summaries(candidate.pools, pools.get(site, ()))
                    if summaries:
                        nodes[site] = summaries
        except WireError as wrong:
            return str(wrong)
        answers.destinations.update(destinations)
        answers.free.update(free)
        answers.nodes.update(nodes)
        answers.residual.update(residual)
        if not entry.candidates:
            return entry.reason or "no candidate"
        return None

    async def _decide(
        self, requests: Sequence[PlacementRequest], answers: Sequence[Answers]
    ) -> list[Decision]:
        """The engine's decisions for all `requests` together, on one view composed of what
        every region reported for any of them: the joint choice takes what one decision
        takes from the capacity the others see."""
        if not requests:
            return []
        backbone, _ = await self._live_map.snapshot()
        engine = self._live_map.engine
        snapshot = planner.composed(backbone, answers)
        sources, destinations = planner.segments(answers)
        router = ComposedRouter(engine.router, sources=sources, destinations=destinations)
        async with self._plan_lock:
            with span("placement.decide", {"cnbrain.requests": len(requests)}):
                decisions = await asyncio.to_thread(
                    engine.place_batch,
                    list(requests),
                    reserve=False,
                    snapshot=snapshot,
                    router=router,
                )
        if len(decisions) != len(requests):
            raise RuntimeError(f"{len(decisions)} decisions for {len(requests)} requests")
        return decisions


def _commitments(items: Sequence[Pending], plans: Sequence[Plan]) -> dict[int, Commitment]:
    """What every owner stores with its committed part of each plan, by item."""
    return {
        plan.item: _commitment(plan, items[plan.item].request, items[plan.item].text)
        for plan in plans
    }


def _commitment(plan: Plan, request: PlacementRequest, request_text: str) -> Commitment:
    """What every owner stores with its committed part of `plan`, made for `request`
    (`request_text`: its wire form)."""
    return Commitment(
        reservation_id=plan.reservation.id,
        decision=plan.decision.model_dump(mode="json"),
        decision_json=plan.decision.model_dump_json(),
        request=request.model_dump(mode="json"),
        request_json=request_text,
    )
