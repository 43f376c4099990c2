"""Cross-region placement: candidates from the regions, segments from their owners, the joint
choice, and a two-phase reservation in every owner.

One attempt: ask the Top-N regions for candidate sites (with destination segments) and the
source region for source segments, in parallel and under a deadline; compose routes with the
national brain's own backbone paths; let the placement engine (filters, scores, Top-N,
CP-SAT) choose the site and route; prepare the three parts (destination: compute and
destination links; national: backbone links; source: source links and the tenant's quota);
commit destination, national, source; or release everything and try again without the
region that failed. Parts a crashed brain prepared expire there by themselves.
"""

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import grpc
import numpy as np

from cnbrain.domain.decision import Decision, DecisionStatus, SegmentKind
from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.domain.request import PlacementRequest
from cnbrain.federation.codec import (
    WireError,
    graph_path,
    prepare_message,
    request_json,
    reservation_of,
)
from cnbrain.federation.ownership import link_index
from cnbrain.ledger.reservation import Reservation
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.national.regions import Region
from cnbrain.routing.composed import ComposedRouter
from cnbrain.routing.paths import GraphPath
from cnbrain.storage import peer_ledger
from cnbrain.storage.errors import CapacityConflict, LedgerStoreError, QuotaExceeded
from cnbrain.storage.models import utcnow
from cnbrain.v1 import ledger_pb2, regional_pb2

if TYPE_CHECKING:
    from cnbrain.national.brain import NationalBrain

log = logging.getLogger("cnbrain.national")

FEDERATION_POLICY = "federation"
"""Policy named by rejections the federation made before any engine decision."""


@dataclass(frozen=True, slots=True)
class Part:
    """One owner's part of a reservation; `region` None: the national brain's own."""

    owner: str
    region: Region | None
    claim: peer_ledger.PeerClaim


@dataclass(slots=True)
class Answers:
    """What the regions said for one attempt."""

    access_node: str
    source: list[GraphPath]
    destinations: dict[int, list[GraphPath]]
    free: dict[int, regional_pb2.SiteCandidate]
    residual: dict[int, int]
    notes: list[str]


class AttemptError(Exception):
    """This attempt cannot go on; the message says why, `region` is the one to leave out."""

    def __init__(self, message: str, region: str | None = None) -> None:
        super().__init__(message)
        self.region = region


class CrossRegionPlacer:
    def __init__(self, brain: "NationalBrain") -> None:
        self._brain = brain
        self._inflight: dict[str, asyncio.Future[Decision]] = {}
        self._unreleased: set[tuple[str, str, str]] = set()

    async def place(self, request: PlacementRequest, source_region: str) -> Decision:
        """A placed decision whose reservation is committed in every owner, or a rejection
        with its reason. Concurrent and repeated calls for one request id share one answer."""
        earlier = await self._committed(request.id)
        if earlier is not None:
            return earlier
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
        if record is None or record.state == peer_ledger.RELEASED:
            return False
        owners = _owners(record.decision)
        await asyncio.gather(*(self._release_in(owner, reservation_id, reason) for owner in owners))
        return True

    async def _place(self, request: PlacementRequest, source_region: str) -> Decision:
        settings = self._brain.settings
        excluded: set[str] = set()
        notes: list[str] = []
        for _ in range(settings.placement_attempts):
            try:
                return await self._attempt(request, source_region, excluded, notes)
            except AttemptError as failure:
                notes.append(str(failure))
                if failure.region is None or failure.region == source_region:
                    break
                excluded.add(failure.region)
        return self._rejected(request, "; ".join(notes) or "no region could place it")

    async def _attempt(
        self,
        request: PlacementRequest,
        source_region: str,
        excluded: set[str],
        notes: list[str],
    ) -> Decision:
        brain = self._brain
        source = brain.directory.get(source_region)
        if source is None:
            raise AttemptError(f"region {source_region!r} is not registered")
        regions = brain.directory.choose(request, brain.settings.top_regions, exclude=excluded)
        if not regions:
            raise AttemptError("no registered region has free capacity for the request")
        started = time.perf_counter()
        answers = await self._ask(request, source, regions)
        asked = time.perf_counter()
        notes.extend(answers.notes)
        decision = await self._decide(request, answers)
        decided = time.perf_counter()
        if decision.status is DecisionStatus.REJECTED:
            return self._rejected(request, "; ".join([decision.reason or "", *notes]).strip("; "))
        reservation = brain.engine.reservation_for(request, decision)
        parts = self._parts(request, decision, reservation)
        await self._prepare(parts)
        prepared = time.perf_counter()
        decision = _annotated(
            decision,
            reservation_id=reservation.id,
            regions=[r.id for r in regions],
            timings_ms={
                "federation_ask": (asked - started) * 1000,
                "federation_decide": (decided - asked) * 1000,
                "federation_prepare": (prepared - decided) * 1000,
            },
        )
        if brain.settings.commit_delay_ms:
            await asyncio.sleep(brain.settings.commit_delay_ms / 1000)
        await self._commit(request, decision, parts)
        return decision

    async def _ask(
        self, request: PlacementRequest, source: Region, regions: Sequence[Region]
    ) -> Answers:
        settings = self._brain.settings
        text = request_json(request)
        timeout = settings.candidate_deadline_s
        source_call = source.brain.GetSourceSegments(
            regional_pb2.GetSourceSegmentsRequest(
                request_json=text, paths=settings.paths_per_segment
            ),
            timeout=timeout,
        )
        candidate_calls = [
            region.brain.GetCandidates(
                regional_pb2.GetCandidatesRequest(
                    request_json=text,
                    max_sites=settings.sites_per_region,
                    paths_per_site=settings.paths_per_segment,
                ),
                timeout=timeout,
            )
            for region in regions
        ]
        source_task = asyncio.ensure_future(source_call)
        candidate_answers = await asyncio.gather(*candidate_calls, return_exceptions=True)
        try:
            source_answer = await source_task
        except grpc.aio.AioRpcError as error:
            raise AttemptError(
                f"source region {source.id!r}: {_failure(error)}", region=source.id
            ) from None
        arrays = self._brain.engine.arrays
        links = link_index(arrays)
        answers = Answers(
            access_node=source_answer.access_node,
            source=[],
            destinations={},
            free={},
            residual={},
            notes=[],
        )
        try:
            for path in source_answer.paths:
                self._check_owned(path.link_ids, source.id)
                answers.source.append(graph_path(path, arrays=arrays, links=links))
                answers.residual.update(
                    zip(_indices(path.link_ids, links), path.free_mbps, strict=True)
                )
        except WireError as wrong:
            raise AttemptError(f"source region {source.id!r}: {wrong}", region=source.id) from None
        if not answers.source:
            raise AttemptError(
                f"source region {source.id!r} has no path to its gateway with the bandwidth"
            )
        for region, answer in zip(regions, candidate_answers, strict=True):
            if isinstance(answer, BaseException):
                answers.notes.append(f"region {region.id!r}: {_failure(answer)}")
                continue
            assert isinstance(answer, regional_pb2.GetCandidatesResponse)
            if not answer.candidates:
                answers.notes.append(f"region {region.id!r}: {answer.reason or 'no candidate'}")
            try:
                self._take_candidates(region, answer, answers)
            except WireError as wrong:
                answers.notes.append(f"region {region.id!r}: {wrong}")
        return answers

    def _take_candidates(
        self, region: Region, answer: regional_pb2.GetCandidatesResponse, answers: Answers
    ) -> None:
        arrays = self._brain.engine.arrays
        links = link_index(arrays)
        for candidate in answer.candidates:
            site = arrays.map.site_index.get(candidate.site_id)
            if site is None or arrays.map.sites[site].province not in region.provinces:
                raise WireError(f"site {candidate.site_id!r} is not one of the region's")
            paths = []
            for path in candidate.paths:
                self._check_owned(path.link_ids, region.id)
                if not path.nodes or path.nodes[-1] != candidate.site_id:
                    raise WireError(f"a destination path does not end at {candidate.site_id!r}")
                paths.append(graph_path(path, arrays=arrays, links=links))
                answers.residual.update(
                    zip(_indices(path.link_ids, links), path.free_mbps, strict=True)
                )
            if paths:
                answers.destinations[site] = paths
                answers.free[site] = candidate

    def _check_owned(self, link_ids: Sequence[str], owner: str) -> None:
        cmap = self._brain.engine.map
        links = link_index(self._brain.engine.arrays)
        for link_id in link_ids:
            j = links.get(link_id)
            if j is None:
                raise WireError(f"unknown link {link_id!r}")
            if cmap.links[j].owner != owner:
                raise WireError(f"link {link_id!r} is not owned by {owner!r}")

    async def _decide(self, request: PlacementRequest, answers: Answers) -> Decision:
        brain = self._brain
        snapshot = self._composed(await brain.backbone_snapshot(), answers)
        router = ComposedRouter(
            brain.engine.router,
            access_node=answers.access_node,
            source=answers.source,
            destinations=answers.destinations,
        )
        async with brain.plan_lock:
            return await asyncio.to_thread(
                brain.engine.place, request, reserve=False, snapshot=snapshot, router=router
            )

    def _composed(self, backbone: Snapshot, answers: Answers) -> Snapshot:
        """Free capacity as the regions reported it for their candidates, the national
        brain's own for the backbone, nothing anywhere else."""
        arrays = backbone.arrays
        n = arrays.n_sites
        cpu, mem, storage = (np.zeros(n, dtype=np.int64) for _ in range(3))
        acc = np.zeros_like(arrays.cap_acc)
        for site, candidate in answers.free.items():
            free = candidate.free
            cpu[site], mem[site], storage[site] = free.cpu_m, free.mem_mib, free.storage_gib
            column = arrays.accelerator_column.get(free.accelerator_model)
            if column is not None:
                acc[site, column] = free.accelerator_count
        residual = np.where(arrays.link_backbone, backbone.residual_mbps, 0)
        for j, free_mbps in answers.residual.items():
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
        assert decision.path is not None and decision.site is not None
        arrays = self._brain.engine.arrays
        compute = reservation.compute
        models = {column: model for model, column in arrays.accelerator_column.items()}
        model = models.get(compute.acc_column) if compute.acc_count else None
        parts: list[Part] = []
        for segment in decision.path.segments:
            destination = segment.kind is SegmentKind.DESTINATION
            source = segment.kind is SegmentKind.SOURCE
            owner = segment.owner
            region = None if owner == NATIONAL_OWNER else self._brain.directory.get(owner)
            if owner != NATIONAL_OWNER and region is None:
                raise AttemptError(f"region {owner!r} is not registered", region=owner)
            claim = peer_ledger.PeerClaim(
                reservation_id=reservation.id,
                request_id=request.id,
                tenant_id=request.tenant,
                site_id=decision.site if destination else None,
                cpu_m=compute.cpu_m if destination or source else 0,
                mem_mib=compute.mem_mib if destination or source else 0,
                storage_gib=compute.storage_gib if destination or source else 0,
                accelerator_model=model if destination or source else None,
                accelerator_count=compute.acc_count if (destination or source) and model else 0,
                link_ids=tuple(hop.link for hop in segment.hops) if reservation.mbps else (),
                mbps=reservation.mbps,
                counts_quota=source,
            )
            parts.append(Part(owner=owner, region=region, claim=claim))
        return parts

    async def _prepare(self, parts: Sequence[Part]) -> None:
        ttl_ms = self._brain.settings.prepare_ttl_ms
        results = await asyncio.gather(
            *(self._prepare_one(part, ttl_ms) for part in parts), return_exceptions=True
        )
        failures = [
            (part, result)
            for part, result in zip(parts, results, strict=True)
            if result is not None
        ]
        if not failures:
            return
        await self._release_parts(parts, "a part could not be prepared")
        part, failure = failures[0]
        reason = failure if isinstance(failure, str) else _failure(failure)
        raise AttemptError(
            f"prepare in {part.owner!r}: {reason}", region=part.owner if part.region else None
        )

    async def _prepare_one(self, part: Part, ttl_ms: int) -> str | None:
        if part.region is None:
            brain = self._brain
            expires_at = utcnow() + _ms(ttl_ms)
            arrays = brain.engine.arrays
            taken: Reservation | None = None
            brain.begin_local_change()
            try:
                async with brain.sessions.begin() as session:
                    if await peer_ledger.prepare(session, claim=part.claim, expires_at=expires_at):
                        taken = reservation_of(part.claim, arrays=arrays, links=link_index(arrays))
            except (CapacityConflict, QuotaExceeded, LedgerStoreError) as short:
                return str(short)
            finally:
                brain.end_local_change(taken)
            return None
        answer = await part.region.ledger.Prepare(
            prepare_message(part.claim, ttl_ms=ttl_ms),
            timeout=self._brain.settings.call_deadline_s,
        )
        return None if answer.prepared else answer.reason or "refused"

    async def _commit(
        self, request: PlacementRequest, decision: Decision, parts: Sequence[Part]
    ) -> None:
        """Destination first: once it holds the compute, the rest only has links and quota."""
        order = {SegmentKind.DESTINATION: 0, SegmentKind.BACKBONE: 1, SegmentKind.SOURCE: 2}
        kinds = {s.owner: s.kind for s in decision.path.segments} if decision.path else {}
        document = decision.model_dump(mode="json")
        text = decision.model_dump_json()
        placed = request_json(request)
        for part in sorted(parts, key=lambda p: order[kinds[p.owner]]):
            try:
                if part.region is None:
                    async with self._brain.sessions.begin() as session:
                        reason = await peer_ledger.commit(
                            session,
                            reservation_id=part.claim.reservation_id,
                            decision=document,
                            request=request.model_dump(mode="json"),
                        )
                else:
                    answer = await part.region.ledger.Commit(
                        ledger_pb2.CommitRequest(
                            reservation_id=part.claim.reservation_id,
                            decision_json=text,
                            request_json=placed,
                        ),
                        timeout=self._brain.settings.call_deadline_s,
                    )
                    reason = None if answer.committed else answer.reason
            except grpc.aio.AioRpcError as error:
                reason = _failure(error)
            if reason is not None:
                await self._release_parts(parts, "a part could not be committed")
                raise AttemptError(
                    f"commit in {part.owner!r}: {reason}",
                    region=part.owner if part.region else None,
                )

    async def _release_parts(self, parts: Sequence[Part], reason: str) -> None:
        await asyncio.gather(
            *(self._release_in(p.owner, p.claim.reservation_id, reason) for p in parts)
        )

    async def retry_releases_forever(self, interval_s: float = 2.0) -> None:
        """Release again, every `interval_s`, the parts a region could not release when
        asked (it was down or unreachable), until each is released. Until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            for owner, reservation_id, reason in list(self._unreleased):
                self._unreleased.discard((owner, reservation_id, reason))
                await self._release_in(owner, reservation_id, reason)

    async def _release_in(self, owner: str, reservation_id: str, reason: str) -> None:
        """A part that cannot be released now is released by `retry_releases_forever` once
        its brain answers (a prepared one also expires there by itself)."""
        brain = self._brain
        if owner == NATIONAL_OWNER:
            async with brain.sessions.begin() as session:
                released = await peer_ledger.release(session, reservation_id=reservation_id)
            if released:
                brain.capacity_changed()
            return
        region = brain.directory.get(owner)
        try:
            if region is None:
                raise LookupError(f"region {owner!r} is not registered")
            await region.ledger.Release(
                ledger_pb2.ReleaseRequest(reservation_id=reservation_id, reason=reason),
                timeout=brain.settings.call_deadline_s,
            )
        except (grpc.aio.AioRpcError, LookupError) as error:
            log.warning("release of %s in %s failed (%s); will retry", reservation_id, owner, error)
            self._unreleased.add((owner, reservation_id, reason))

    async def _committed(self, request_id: str) -> Decision | None:
        async with self._brain.sessions() as session:
            for part in await peer_ledger.parts_of_request(session, request_id=request_id):
                if part.state == peer_ledger.HELD and part.decision is not None:
                    return Decision.model_validate(part.decision)
        return None

    @staticmethod
    def _rejected(request: PlacementRequest, reason: str) -> Decision:
        return Decision(
            request_id=request.id,
            status=DecisionStatus.REJECTED,
            policy=FEDERATION_POLICY,
            reason=f"no region could place it: {reason}",
        )


def _annotated(
    decision: Decision, *, reservation_id: str, regions: list[str], timings_ms: dict[str, float]
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
                "notes": (*explanation.notes, f"candidates asked of regions {', '.join(regions)}"),
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


def _indices(link_ids: Sequence[str], links: Mapping[str, int]) -> list[int]:
    return [links[link_id] for link_id in link_ids]


def _failure(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name.lower()}: {error.details()}"
    return f"{type(error).__name__}: {error}"


def _ms(ms: int) -> timedelta:
    return timedelta(milliseconds=ms)
