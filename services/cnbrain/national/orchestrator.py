"""Cross-region placement: candidates from the regions, segments from their owners, the joint
choice, and a two-phase reservation in every owner, for batches of requests.

Requests that arrive while a batch is being worked on wait and go together as the next batch
(group commit). One attempt for a batch: ask every region some request of the batch chose
for candidate sites (with destination segments) and every source region for source segments,
one call per region carrying all the batch's requests for it, in parallel and under a
deadline; compose routes with the national brain's own backbone paths; let the placement
engine (filters, scores, Top-N, CP-SAT) choose site and route for the whole batch on one
composed view, so two requests never take the same capacity; prepare every owner's parts of
the batch in one call per owner (destination: compute and destination links; national:
backbone links; source: source links and the tenant's quota); commit them, again one call per
owner; release every part of a request that one owner refused or could not commit.

A request whose part failed is tried again on its own, without the region that failed (up to
`placement_attempts` in all), then rejected with every reason. Parts a crashed brain prepared
expire there by themselves.
"""

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import grpc
import numpy as np
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.decision import Decision, DecisionStatus, SegmentKind
from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.states import ReservationState
from cnbrain.federation.codec import PathReader, WireError, part_message, request_json
from cnbrain.federation.ledger_service import (
    CapacityWatch,
    commit_parts,
    prepare_parts,
    release_parts,
)
from cnbrain.group_commit import GroupCommit
from cnbrain.ledger.claim import Claim
from cnbrain.ledger.reservation import Reservation
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.national.regions import Region, RegionDirectory
from cnbrain.national.settings import NationalSettings
from cnbrain.placement.engine import PlacementEngine
from cnbrain.routing.composed import ComposedRouter
from cnbrain.routing.paths import GraphPath
from cnbrain.storage import peer_ledger
from cnbrain.v1 import ledger_pb2, regional_pb2

log = logging.getLogger("cnbrain.national")

FEDERATION_POLICY = "federation"
"""Policy named by rejections the federation made before any engine decision."""

BATCH_CAP = 64
"""Requests placed together at most."""


class National(CapacityWatch, Protocol):
    """What the placer uses of the national brain (`national.brain.NationalBrain`): its
    settings, database sessions, engine (the backbone's paths), the regions' directory, its
    backbone snapshots and plan lock, and the watch of its own ledger changes."""

    @property
    def settings(self) -> NationalSettings: ...

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]: ...

    @property
    def engine(self) -> PlacementEngine: ...

    @property
    def directory(self) -> RegionDirectory: ...

    @property
    def plan_lock(self) -> asyncio.Lock: ...

    async def backbone_snapshot(self) -> Snapshot: ...


@dataclass(frozen=True, slots=True)
class Part:
    """One owner's part of a reservation; `region` None: the national brain's own."""

    owner: str
    region: Region | None
    claim: Claim


@dataclass(slots=True)
class Pending:
    """A request being placed: its wire form (encoded once), the regions left out of its
    next attempt, and the notes its attempts collected."""

    request: PlacementRequest
    source_region: str
    text: str
    excluded: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Answers:
    """What the regions said about one request in one attempt."""

    access_node: str
    source: list[GraphPath]
    destinations: dict[int, list[GraphPath]]
    free: dict[int, regional_pb2.SiteCandidate]
    residual: dict[int, int]
    regions: list[str]


@dataclass(slots=True)
class Plan:
    """A placed decision of an attempt, its reservation and the owners' parts of it."""

    item: int
    decision: Decision
    reservation: Reservation
    parts: list[Part]


class AttemptError(Exception):
    """This attempt cannot go on; the message says why, `region` is the one to leave out."""

    def __init__(self, message: str, region: str | None = None) -> None:
        super().__init__(message)
        self.region = region


AttemptResult = Decision | AttemptError


class CrossRegionPlacer:
    def __init__(self, brain: National) -> None:
        self._brain = brain
        self._inflight: dict[str, asyncio.Future[Decision]] = {}
        self._unreleased: set[tuple[str, str, str]] = set()
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
            future.set_result(decision)
            return decision
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here, so an unawaited future logs nothing
            raise
        finally:
            del self._inflight[request.id]

    async def release(self, reservation_id: str, reason: str) -> bool:
        """Release every part of a committed cross-region reservation; False when the
        national brain holds no such reservation."""
        async with self._brain.sessions() as session:
            record = await peer_ledger.get(session, reservation_id=reservation_id)
        if record is None or record.state == ReservationState.RELEASED:
            return False
        owners = _owners(record.decision)
        await asyncio.gather(
            *(self._release_in(owner, [reservation_id], reason) for owner in owners)
        )
        return True

    async def _place(self, request: PlacementRequest, source_region: str) -> Decision:
        """The first attempt goes with whatever batch is next; every further one alone."""
        item = Pending(request=request, source_region=source_region, text=request_json(request))
        try:
            return await self._batches.submit(item)
        except AttemptError as failure:
            error = failure
        for _ in range(self._brain.settings.placement_attempts - 1):
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
        return self._rejected(request, "; ".join(item.notes) or "no region could place it")

    async def _first_attempts(self, items: list[Pending]) -> list[Decision | BaseException]:
        """The batch's answers: the decision committed earlier for a request id, or the
        outcome of its first attempt (an AttemptError goes to its caller to try again)."""
        async with self._brain.sessions() as session:
            earlier = await peer_ledger.held_decisions(
                session, request_ids=[item.request.id for item in items]
            )
        fresh = [i for i, item in enumerate(items) if item.request.id not in earlier]
        outcomes = iter(await self._attempt([items[i] for i in fresh]) if fresh else [])
        return [
            Decision.model_validate(earlier[item.request.id])
            if item.request.id in earlier
            else next(outcomes)
            for item in items
        ]

    async def _attempt(self, items: Sequence[Pending]) -> list[AttemptResult]:
        """One attempt for every item: its placed decision, committed in every owner; its
        rejection; or the AttemptError that ended it (all its parts released)."""
        brain = self._brain
        outcomes: list[AttemptResult | None] = [None] * len(items)
        chosen: dict[int, tuple[Region, list[Region]]] = {}
        for i, item in enumerate(items):
            source = brain.directory.get(item.source_region)
            if source is None:
                outcomes[i] = AttemptError(f"region {item.source_region!r} is not registered")
                continue
            regions = brain.directory.choose(
                item.request, brain.settings.top_regions, exclude=item.excluded
            )
            if not regions:
                outcomes[i] = AttemptError("no registered region has free capacity for the request")
                continue
            chosen[i] = (source, regions)
        started = time.perf_counter()
        answers = await self._ask(items, chosen)
        asked = time.perf_counter()
        deciding: list[int] = []
        for i, answer in answers.items():
            if isinstance(answer, AttemptError):
                outcomes[i] = answer
            else:
                deciding.append(i)
        decisions = await self._decide(
            [items[i].request for i in deciding], [_answers(answers[i]) for i in deciding]
        )
        decided = time.perf_counter()
        plans: list[Plan] = []
        for i, decision in zip(deciding, decisions, strict=True):
            item = items[i]
            if decision.status is DecisionStatus.REJECTED:
                reason = "; ".join([decision.reason or "", *item.notes]).strip("; ")
                outcomes[i] = self._rejected(item.request, reason)
                continue
            reservation = brain.engine.reservation_for(item.request, decision)
            try:
                parts = self._parts(item.request, decision, reservation)
            except AttemptError as unregistered:
                outcomes[i] = unregistered
                continue
            plans.append(Plan(item=i, decision=decision, reservation=reservation, parts=parts))
        outcomes_of_prepare = await self._prepare(plans)
        for i, refused in outcomes_of_prepare.items():
            outcomes[i] = refused
        prepared = time.perf_counter()
        plans = [plan for plan in plans if outcomes[plan.item] is None]
        for plan in plans:
            plan.decision = _annotated(
                plan.decision,
                reservation_id=plan.reservation.id,
                regions=_answers(answers[plan.item]).regions,
                batch=len(items),
                timings_ms={
                    "federation_ask": (asked - started) * 1000,
                    "federation_decide": (decided - asked) * 1000,
                    "federation_prepare": (prepared - decided) * 1000,
                },
            )
        failed = await self._commit(items, plans)
        for plan in plans:
            outcomes[plan.item] = failed.get(plan.item, plan.decision)
        assert all(outcome is not None for outcome in outcomes)
        return [outcome for outcome in outcomes if outcome is not None]

    async def _ask(
        self, items: Sequence[Pending], chosen: Mapping[int, tuple[Region, list[Region]]]
    ) -> dict[int, Answers | AttemptError]:
        """One GetSourceSegments per source region and one GetCandidates per region asked,
        each for all the items concerned, in parallel; each item's answers (or why not)."""
        settings = self._brain.settings
        timeout = settings.candidate_deadline_s
        sources: dict[str, tuple[Region, list[int]]] = {}
        asked: dict[str, tuple[Region, list[int]]] = {}
        for i, (source, regions) in chosen.items():
            sources.setdefault(source.id, (source, []))[1].append(i)
            for region in regions:
                asked.setdefault(region.id, (region, []))[1].append(i)
        source_calls = [
            region.brain.GetSourceSegments(
                regional_pb2.GetSourceSegmentsRequest(
                    requests_json=[items[i].text for i in indices],
                    paths=settings.paths_per_segment,
                ),
                timeout=timeout,
            )
            for region, indices in sources.values()
        ]
        candidate_calls = [
            region.brain.GetCandidates(
                regional_pb2.GetCandidatesRequest(
                    requests_json=[items[i].text for i in indices],
                    max_sites=settings.sites_per_region,
                    paths_per_site=settings.paths_per_segment,
                ),
                timeout=timeout,
            )
            for region, indices in asked.values()
        ]
        replies = await asyncio.gather(*source_calls, *candidate_calls, return_exceptions=True)
        source_replies = dict(zip(sources, replies[: len(sources)], strict=True))
        candidate_replies = dict(zip(asked, replies[len(sources) :], strict=True))
        found: dict[int, Answers | AttemptError] = {}
        reader = PathReader(self._brain.engine.arrays)
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
            raise AttemptError(f"source region {source.id!r}: {_failure(reply)}", region=source.id)
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
            return _failure(reply)
        assert isinstance(reply, regional_pb2.GetCandidatesResponse)
        if len(reply.answers) != count:
            return f"{len(reply.answers)} answers for {count} requests"
        entry = reply.answers[position]
        arrays = self._brain.engine.arrays
        destinations: dict[int, list[GraphPath]] = {}
        free: dict[int, regional_pb2.SiteCandidate] = {}
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
                    free[site] = candidate
        except WireError as wrong:
            return str(wrong)
        answers.destinations.update(destinations)
        answers.free.update(free)
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
        brain = self._brain
        snapshot = self._composed(await brain.backbone_snapshot(), answers)
        sources: dict[str, list[GraphPath]] = {}
        destinations: dict[int, list[GraphPath]] = {}
        for answer in answers:
            _merge(sources.setdefault(answer.access_node, []), answer.source)
            for site, paths in answer.destinations.items():
                _merge(destinations.setdefault(site, []), paths)
        router = ComposedRouter(brain.engine.router, sources=sources, destinations=destinations)
        async with brain.plan_lock:
            decisions = await asyncio.to_thread(
                brain.engine.place_batch,
                list(requests),
                reserve=False,
                snapshot=snapshot,
                router=router,
            )
        if len(decisions) != len(requests):
            raise RuntimeError(f"{len(decisions)} decisions for {len(requests)} requests")
        return decisions

    def _composed(self, backbone: Snapshot, answers: Sequence[Answers]) -> Snapshot:
        """Free capacity as the regions reported it for their candidates, the national
        brain's own for the backbone, nothing anywhere else."""
        arrays = backbone.arrays
        n = arrays.n_sites
        cpu, mem, storage = (np.zeros(n, dtype=np.int64) for _ in range(3))
        acc = np.zeros_like(arrays.cap_acc)
        residual = np.where(arrays.link_backbone, backbone.residual_mbps, 0)
        for answer in answers:
            for site, candidate in answer.free.items():
                free = candidate.free
                cpu[site], mem[site], storage[site] = free.cpu_m, free.mem_mib, free.storage_gib
                column = arrays.accelerator_column.get(free.accelerator_model)
                if column is not None:
                    acc[site, column] = free.accelerator_count
            for j, free_mbps in answer.residual.items():
                if not arrays.link_backbone[j]:
                    residual[j] = free_mbps
        return Snapshot.of_free(
            arrays,
            version=backbone.version,
            free_cpu_m=cpu,
            free_mem_mib=mem,
            free_storage_gib=storage,
            free_acc=acc,
            residual_mbps=residual,
        )

    def _parts(
        self, request: PlacementRequest, decision: Decision, reservation: Reservation
    ) -> list[Part]:
        """One part per owner of the decision's segments: the destination's compute and
        links, the backbone's links, the source's links and the tenant's quota. An owner of
        both the source and the destination segment (another province of the same region)
        has one part with both."""
        assert decision.path is not None and decision.site is not None
        arrays = self._brain.engine.arrays
        compute = reservation.compute
        model = arrays.map.accelerator_models[compute.acc_column] if compute.acc_count else None
        owners: dict[str, tuple[bool, bool, list[str]]] = {}
        for segment in decision.path.segments:
            destination, source, links = owners.get(segment.owner, (False, False, []))
            owners[segment.owner] = (
                destination or segment.kind is SegmentKind.DESTINATION,
                source or segment.kind is SegmentKind.SOURCE,
                links + [hop.link for hop in segment.hops],
            )
        parts: list[Part] = []
        for owner, (destination, source, links) in owners.items():
            region = None if owner == NATIONAL_OWNER else self._brain.directory.get(owner)
            if owner != NATIONAL_OWNER and region is None:
                raise AttemptError(f"region {owner!r} is not registered", region=owner)
            amounts = destination or source
            claim = Claim(
                reservation_id=reservation.id,
                request_id=request.id,
                tenant_id=request.tenant,
                site_id=decision.site if destination else None,
                cpu_m=compute.cpu_m if amounts else 0,
                mem_mib=compute.mem_mib if amounts else 0,
                storage_gib=compute.storage_gib if amounts else 0,
                accelerator_model=model if amounts else None,
                accelerator_count=compute.acc_count if amounts and model else 0,
                link_ids=tuple(links) if reservation.mbps else (),
                mbps=reservation.mbps,
                counts_quota=source,
            )
            parts.append(Part(owner=owner, region=region, claim=claim))
        return parts

    async def _prepare(self, plans: Sequence[Plan]) -> dict[int, AttemptError]:
        """Prepare every part of `plans`, one call per owner; for each plan with a part that
        was refused (all its parts then released), the AttemptError, by item."""
        by_owner = _by_owner(plans)
        ttl_ms = self._brain.settings.prepare_ttl_ms
        replies = await asyncio.gather(
            *(self._prepare_in(owner, parts, ttl_ms) for owner, parts in by_owner.items()),
            return_exceptions=True,
        )
        failures = _failures("prepare", by_owner, replies)
        await self._release_plans(
            [plan for plan in plans if plan.item in failures], "a part could not be prepared"
        )
        return failures

    async def _prepare_in(
        self, owner: str, parts: Sequence[tuple[int, Part]], ttl_ms: int
    ) -> list[str | None]:
        """Prepare `parts` in `owner`; for each, None or why not."""
        claims = [part.claim for _, part in parts]
        brain = self._brain
        if owner == NATIONAL_OWNER:
            return await prepare_parts(
                brain.sessions, claims, ttl_ms=ttl_ms, arrays=brain.engine.arrays, watch=brain
            )
        region = parts[0][1].region
        assert region is not None
        answer = await region.ledger.Prepare(
            ledger_pb2.PrepareRequest(parts=[part_message(c) for c in claims], ttl_ms=ttl_ms),
            timeout=brain.settings.call_deadline_s,
        )
        if len(answer.results) != len(claims):
            raise RuntimeError(f"{len(answer.results)} results for {len(claims)} parts")
        return [None if r.prepared else r.reason or "refused" for r in answer.results]

    async def _commit(
        self, items: Sequence[Pending], plans: Sequence[Plan]
    ) -> dict[int, AttemptError]:
        """Commit every part of `plans`, one call per owner, in parallel (a part committed in
        one owner and not in another is released in both, so the order does not matter); for
        each plan with a part that could not be committed (all its parts then released), the
        AttemptError, by item."""
        by_owner = _by_owner(plans)
        documents = {
            plan.item: (
                plan.decision.model_dump(mode="json"),
                plan.decision.model_dump_json(),
                items[plan.item].request.model_dump(mode="json"),
                items[plan.item].text,
            )
            for plan in plans
        }
        replies = await asyncio.gather(
            *(self._commit_in(owner, parts, documents) for owner, parts in by_owner.items()),
            return_exceptions=True,
        )
        failures = _failures("commit", by_owner, replies)
        await self._release_plans(
            [plan for plan in plans if plan.item in failures], "a part could not be committed"
        )
        return failures

    async def _commit_in(
        self,
        owner: str,
        parts: Sequence[tuple[int, Part]],
        documents: Mapping[int, tuple[dict[str, object], str, dict[str, object], str]],
    ) -> list[str | None]:
        """Commit `parts` in `owner` with their decisions; for each, None or why not."""
        brain = self._brain
        if owner == NATIONAL_OWNER:
            return await commit_parts(
                brain.sessions,
                [
                    (part.claim.reservation_id, documents[item][0], documents[item][2])
                    for item, part in parts
                ],
            )
        region = parts[0][1].region
        assert region is not None
        answer = await region.ledger.Commit(
            ledger_pb2.CommitRequest(
                entries=[
                    ledger_pb2.CommitEntry(
                        reservation_id=part.claim.reservation_id,
                        decision_json=documents[item][1],
                        request_json=documents[item][3],
                    )
                    for item, part in parts
                ]
            ),
            timeout=brain.settings.call_deadline_s,
        )
        if len(answer.results) != len(parts):
            raise RuntimeError(f"{len(answer.results)} results for {len(parts)} parts")
        return [None if r.committed else r.reason or "refused" for r in answer.results]

    async def _release_plans(self, plans: Sequence[Plan], reason: str) -> None:
        """Release every part of `plans`, one call per owner."""
        by_owner = _by_owner(plans)
        await asyncio.gather(
            *(
                self._release_in(owner, [p.claim.reservation_id for _, p in parts], reason)
                for owner, parts in by_owner.items()
            )
        )

    async def retry_releases_forever(self, interval_s: float = 2.0) -> None:
        """Release again, every `interval_s`, the parts a region could not release when
        asked (it was down or unreachable), until each is released. Until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            waiting: dict[tuple[str, str], list[str]] = {}
            for owner, reservation_id, reason in list(self._unreleased):
                self._unreleased.discard((owner, reservation_id, reason))
                waiting.setdefault((owner, reason), []).append(reservation_id)
            for (owner, reason), reservation_ids in waiting.items():
                await self._release_in(owner, reservation_ids, reason)

    async def _release_in(self, owner: str, reservation_ids: Sequence[str], reason: str) -> None:
        """Release `reservation_ids` in `owner` (one call). Parts that cannot be released now
        are released by `retry_releases_forever` once their brain answers (a prepared one
        also expires there by itself)."""
        if not reservation_ids:
            return
        brain = self._brain
        if owner == NATIONAL_OWNER:
            await release_parts(brain.sessions, reservation_ids, watch=brain)
            return
        region = brain.directory.get(owner)
        try:
            if region is None:
                raise LookupError(f"region {owner!r} is not registered")
            await region.ledger.Release(
                ledger_pb2.ReleaseRequest(reservation_ids=list(reservation_ids), reason=reason),
                timeout=brain.settings.call_deadline_s,
            )
        except (grpc.aio.AioRpcError, LookupError) as error:
            log.warning(
                "release of %s in %s failed (%s); will retry",
                ", ".join(reservation_ids),
                owner,
                error,
            )
            self._unreleased.update((owner, rid, reason) for rid in reservation_ids)

    @staticmethod
    def _rejected(request: PlacementRequest, reason: str) -> Decision:
        return Decision(
            request_id=request.id,
            status=DecisionStatus.REJECTED,
            policy=FEDERATION_POLICY,
            reason=f"no region could place it: {reason}",
        )


def _answers(answer: Answers | AttemptError) -> Answers:
    assert isinstance(answer, Answers)
    return answer


def _merge(into: list[GraphPath], paths: Sequence[GraphPath]) -> None:
    """Append the paths of `paths` that `into` does not have yet (same links)."""
    known = {p.links for p in into}
    for path in paths:
        if path.links not in known:
            known.add(path.links)
            into.append(path)
    into.sort(key=lambda p: p.latency_ms)


def _by_owner(plans: Sequence[Plan]) -> dict[str, list[tuple[int, Part]]]:
    """The parts of `plans` by owner, each with its plan's item, in plan order."""
    owners: dict[str, list[tuple[int, Part]]] = {}
    for plan in plans:
        for part in plan.parts:
            owners.setdefault(part.owner, []).append((plan.item, part))
    return owners


def _failures(
    step: str, by_owner: Mapping[str, Sequence[tuple[int, Part]]], replies: Sequence[object]
) -> dict[int, AttemptError]:
    """The AttemptError of each item with a part that `step` failed in its owner, by item
    (the first such part's); `replies` holds each owner's call result, in `by_owner` order."""
    failures: dict[int, AttemptError] = {}
    for (owner, parts), reply in zip(by_owner.items(), replies, strict=True):
        for position, (item, part) in enumerate(parts):
            reason = _reason_at(reply, position, len(parts))
            if reason is not None and item not in failures:
                failures[item] = AttemptError(
                    f"{step} in {owner!r}: {reason}", region=owner if part.region else None
                )
    return failures


def _reason_at(reply: object, position: int, count: int) -> str | None:
    """Why the part at `position` of a call failed: the call's exception, or its result."""
    if isinstance(reply, BaseException):
        return _failure(reply)
    assert isinstance(reply, list) and len(reply) == count
    reason = reply[position]
    assert reason is None or isinstance(reason, str)
    return reason


def _annotated(
    decision: Decision,
    *,
    reservation_id: str,
    regions: list[str],
    batch: int,
    timings_ms: dict[str, float],
) -> Decision:
    """`decision` with its reservation id, the regions asked and the federation's timings."""
    update: dict[str, object] = {"reservation_id": reservation_id}
    explanation = decision.explanation
    if explanation is not None:
        update["explanation"] = explanation.model_copy(
            update={
                "timings_ms": {
                    **explanation.timings_ms,
                    **{k: round(v, 3) for k, v in timings_ms.items()},
                },
                "notes": (
                    *explanation.notes,
                    f"candidates asked of regions {', '.join(regions)}",
                    f"placed in a batch of {batch} cross-region requests",
                ),
            }
        )
    return decision.model_copy(update=update)


def _owners(decision: dict[str, object] | None) -> list[str]:
    if decision is None:
        return [NATIONAL_OWNER]
    parsed = Decision.model_validate(decision)
    if parsed.path is None:
        return [NATIONAL_OWNER]
    return list(dict.fromkeys(s.owner for s in parsed.path.segments))


def _failure(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name.lower()}: {error.details()}"
    return f"{type(error).__name__}: {error}"
