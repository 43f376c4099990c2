"""A regional brain as a member of a federation.

- `RegionalServicer` answers the national brain: candidate sites of this region with their
  destination segments, and source segments from a request's access node, both on this
  brain's own links and ledger; the timelines of its sites and links (its calendar); room
  made on a site by preemption for a waiting cross-region request; and tenants' calls
  another region took that this one answers (`forwarding.ServeForwarded`).
- `NationalLink` registers with the national brain, streams summaries of free capacity and
  of its sites' load (with this region's part of the map when it changed), escalates (and
  quotes) requests that cannot be placed locally, releases cross-region reservations, sends
  and reads the federation's weight matrix, priority classes and tenancy changes, and
  forwards tenants' calls another region must answer.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import astuple
from typing import Any

import grpc
import numpy as np
from pydantic import ValidationError
from typing_extensions import override

from cnbrain.domain.bounds import MAX_EPOCH_S
from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.domain.errors import CnbrainError, Conflict, Invalid, NotFound
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.tenancy import MAX_VERSION, TenancyChange, change_json, change_of
from cnbrain.federation.class_wire import class_message, set_of
from cnbrain.federation.codec import (
    WireError,
    path_message,
    pools_message,
    request_json,
    request_of,
)
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.forward_wire import FORWARD_DEADLINE_S, check_answer
from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.map_delta import RegionPart
from cnbrain.federation.ownership import Ownership
from cnbrain.federation.site_loads import site_load_messages
from cnbrain.federation.timelines import planned_gangs_of, timeline_message
from cnbrain.ledger.audit import Liveness
from cnbrain.ledger.claim import duration_seconds
from cnbrain.ledger.reservation import Reservation
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import gbps_to_mbps
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.errors import RequestError
from cnbrain.placement.request_check import check_request
from cnbrain.placement.weights import WeightMatrix
from cnbrain.regional import site_segments
from cnbrain.regional.forwarding import ServeForwarded
from cnbrain.regional.replicas import Replicas
from cnbrain.regional.schemas import RouteSegmentView, SiteRouteView
from cnbrain.regional.settings import Settings
from cnbrain.regional.use_cases.make_room import MakeRoom
from cnbrain.regional.use_cases.node_waits import gang_or_none
from cnbrain.regional.use_cases.ports import (
    NationalPlan,
    NationalQuote,
    TenancyPage,
)
from cnbrain.regional.use_cases.site_routes import least_gbps
from cnbrain.regional.use_cases.timelines import ReadTimelines
from cnbrain.rpc.client import open_channel
from cnbrain.rpc.failover import Failover
from cnbrain.rpc.security import PeerSecurity
from cnbrain.scheduling.classes import PriorityClass, PriorityClasses
from cnbrain.storage.tenants import QuotaUsed
from cnbrain.v1 import common_pb2, national_pb2, national_pb2_grpc, regional_pb2, regional_pb2_grpc

log = logging.getLogger("cnbrain.regional")

Context = grpc.aio.ServicerContext[Any, Any]

LiveRequests = Callable[[Sequence[str]], Awaitable[Liveness]]
"""The live and the completed ones of some request ids in this brain (Invalid for too
many)."""

ESCALATION_DEADLINE_S = 15.0
"""Deadline of one cross-region placement (candidates, segments, solve, two phases) or quote."""

UNAVAILABLE_POLICY = "federation"

NATIONAL_PEER = "the national brain"

MAX_PLAN_REASON = 500
"""Characters of the national brain's plan reason kept (what the tenant sees)."""

SUMMARY_STREAM_S = 300.0
"""Deadline of one summary stream; a new one (registering again) follows at once."""


_SiteAnswers = dict[tuple[int, int, str], tuple[common_pb2.Compute, list[common_pb2.Path]] | None]
"""(site, bandwidth need in Mbps, accelerator model) -> the site's free capacity for that
model and its destination path messages, or None when it has no path with that bandwidth."""


class RegionalServicer(regional_pb2_grpc.RegionalBrainServiceServicer):
    """Every call answers all its requests on one snapshot of this brain's ledger; a request
    that is not valid here gets its own reason (or error) and the others their answers. A
    request's candidates show what it may take: the free capacity less the room held for
    other requests (`ledger.held_room`), its own held room left to it."""

    def __init__(
        self,
        live_map: LiveMap,
        *,
        region_id: str,
        timelines: ReadTimelines | None = None,
        live_requests: LiveRequests | None = None,
    ) -> None:
        self._live_map = live_map
        self._region_id = region_id
        self._timelines = timelines
        self._live_requests = live_requests
        self.make_room: MakeRoom | None = None
        """Set once the brain's use cases are built; until then MakeRoom is unavailable."""
        self.serve_forwarded: ServeForwarded | None = None
        """Set once the brain's use cases are built; until then ServeForwarded is
        unavailable."""

    @override
    async def GetCandidates(
        self, request: regional_pb2.GetCandidatesRequest, context: Context
    ) -> regional_pb2.GetCandidatesResponse:
        held, _ = await self._live_map.held_snapshot()
        engine = self._live_map.engine
        if held.free.arrays is not engine.arrays:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the map is being reloaded")
        now = self._live_map.now()
        snapshot = held.seen_by(None, now_s=now)
        holders = held.held_for(now)
        wanted = max(1, request.max_sites)
        k = max(1, request.paths_per_site)
        placements = [self._request(text) for text in request.requests_json]
        valid = [p for p in placements if not isinstance(p, str) and p.id not in holders]
        ranked = iter(engine.rank_sites_many(valid, snapshot=snapshot, n=wanted * 2))
        blocked = _BlockedLinks(snapshot)
        sites: _SiteAnswers = {}
        answers = []
        for placement in placements:
            if isinstance(placement, str):
                answers.append(regional_pb2.Candidates(reason=placement))
            elif placement.id in holders:
                own = held.seen_by(placement.id, now_s=now)
                answers.append(self._held_candidates(placement, own, wanted=wanted, k=k))
            else:
                answers.append(
                    self._candidates(
                        placement,
                        snapshot,
                        next(ranked),
                        blocked=blocked,
                        sites=sites,
                        wanted=wanted,
                        k=k,
                    )
                )
        return regional_pb2.GetCandidatesResponse(region_id=self._region_id, answers=answers)

    def _held_candidates(
        self, placement: PlacementRequest, snapshot: Snapshot, *, wanted: int, k: int
    ) -> regional_pb2.Candidates:
        """The candidates of a request with a room hold here, on `snapshot`: what it may take
        (the holds of other requests taken, its own left to it)."""
        [ranking] = self._live_map.engine.rank_sites_many(
            [placement], snapshot=snapshot, n=wanted * 2
        )
        return self._candidates(
            placement,
            snapshot,
            ranking,
            blocked=_BlockedLinks(snapshot),
            sites={},
            wanted=wanted,
            k=k,
        )

    def _candidates(
        self,
        placement: PlacementRequest,
        snapshot: Snapshot,
        ranking: tuple[list[tuple[int, float]], str],
        *,
        blocked: "_BlockedLinks",
        sites: "_SiteAnswers",
        wanted: int,
        k: int,
    ) -> regional_pb2.Candidates:
        """Up to `wanted` sites of `ranking` (the engine's, best first) outside the source
        province that have a destination path, each with up to `k` paths. `sites` keeps, for
        the call, each (site, bandwidth need, accelerator model)'s free capacity and paths
        (None: no path), which depend on nothing else of a request."""
        engine = self._live_map.engine
        ranked, reason = ranking
        cmap = engine.map
        avoid = blocked.of(placement)
        need = gbps_to_mbps(placement.constraints.min_bandwidth_gbps)
        model = placement.resources.accelerator.model if placement.resources.accelerator else ""
        candidates = []
        for site, score in ranked:
            if cmap.sites[site].province == placement.source_province:
                continue
            key = (site, need, model)
            if key not in sites:
                paths = engine.router.destination_paths(site, k=k, blocked=avoid)
                sites[key] = (
                    (
                        _free(snapshot, site, placement),
                        [
                            path_message(
                                p, arrays=engine.arrays, residual_mbps=snapshot.residual_mbps
                            )
                            for p in paths
                        ],
                    )
                    if paths
                    else None
                )
            found = sites[key]
            if found is None:
                continue
            free, messages = found
            candidates.append(
                regional_pb2.SiteCandidate(
                    site_id=cmap.sites[site].id,
                    free=free,
                    paths=messages,
                    score=score,
                    pools=pools_message(snapshot.nodes.get(site, ())),
                )
            )
            if len(candidates) == wanted:
                break
        if not candidates and not reason:
            reason = "no site outside the source province has a path with the bandwidth"
        return regional_pb2.Candidates(candidates=candidates, reason=reason)

    @override
    async def GetSourceSegments(
        self, request: regional_pb2.GetSourceSegmentsRequest, context: Context
    ) -> regional_pb2.GetSourceSegmentsResponse:
        snapshot, _ = await self._live_map.snapshot()
        blocked = _BlockedLinks(snapshot)
        answers = []
        for text in request.requests_json:
            placement = self._request(text)
            if isinstance(placement, str):
                answers.append(regional_pb2.SourceSegments(error=placement))
                continue
            answers.append(
                self._source(placement, snapshot, blocked=blocked, k=max(1, request.paths))
            )
        return regional_pb2.GetSourceSegmentsResponse(region_id=self._region_id, answers=answers)

    def _source(
        self,
        placement: PlacementRequest,
        snapshot: Snapshot,
        *,
        blocked: "_BlockedLinks",
        k: int,
    ) -> regional_pb2.SourceSegments:
        engine = self._live_map.engine
        province = engine.map.provinces[placement.source_province]
        if province.region != self._region_id:
            return regional_pb2.SourceSegments(
                error=f"province {placement.source_province!r} is not in region {self._region_id!r}"
            )
        access_node = placement.access_node or province.access_nodes[0]
        paths = engine.router.source_paths(access_node, k=k, blocked=blocked.of(placement))
        return regional_pb2.SourceSegments(
            access_node=access_node,
            gateway=province.gateway,
            paths=[
                path_message(p, arrays=engine.arrays, residual_mbps=snapshot.residual_mbps)
                for p in paths
            ],
        )

    @override
    async def GetSiteSegments(
        self, request: regional_pb2.GetSiteSegmentsRequest, context: Context
    ) -> regional_pb2.GetSiteSegmentsResponse:
        asked = (request.site_ids, request.pairs, request.access_nodes, request.access_sites)
        if any(len(many) > site_segments.MAX_ASKS for many in asked):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"at most {site_segments.MAX_ASKS} sites, pairs, access nodes and access sites"
                " each",
            )
        if not 1 <= request.paths <= site_segments.MAX_PATHS or request.min_free_mbps < 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"paths must be 1 to {site_segments.MAX_PATHS}, min_free_mbps at least 0",
            )
        snapshot, _ = await self._live_map.snapshot()
        return site_segments.SiteSegments(
            engine=self._live_map.engine,
            snapshot=snapshot,
            region_id=self._region_id,
            paths=request.paths,
            blocked=_narrower_than(snapshot, request.min_free_mbps),
        ).answer(request)

    @override
    async def GetTimelines(
        self, request: regional_pb2.GetTimelinesRequest, context: Context
    ) -> regional_pb2.GetTimelinesResponse:
        if self._timelines is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this brain keeps no calendar")
        gang, duration_s = None, 1
        if request.request_json:
            waiting = self._request(request.request_json)
            if isinstance(waiting, str):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, waiting)
            gang = gang_or_none(waiting)
            duration_s = duration_seconds(waiting.duration_hours)
        try:
            now, timelines, nodes = await self._timelines(
                list(request.site_ids),
                list(request.link_ids),
                request_id=request.request_id,
                gang=gang,
                duration_s=duration_s,
                planned=planned_gangs_of(request.planned_gangs),
            )
        except Invalid as wrong:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(wrong))
        arrays = self._live_map.engine.arrays
        return regional_pb2.GetTimelinesResponse(
            region_id=self._region_id,
            now_s=now,
            timelines=[timeline_message(key, profile, arrays=arrays) for key, profile in timelines],
            nodes_free_at=[
                regional_pb2.NodesFreeAt(site_id=site, at_s=at or 0) for site, at in nodes.items()
            ],
        )

    @override
    async def MakeRoom(
        self, request: regional_pb2.MakeRoomRequest, context: Context
    ) -> regional_pb2.MakeRoomResponse:
        make_room = self.make_room
        if make_room is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the brain is starting")
        placement = self._request(request.request_json)
        if isinstance(placement, str):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, placement)
        try:
            room = await make_room(placement, list(request.site_ids))
        except Invalid as wrong:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(wrong))
        return regional_pb2.MakeRoomResponse(
            requeued=room.requeued, site_id=room.site_id or "", reason=room.reason
        )

    @override
    async def GetLiveRequests(
        self, request: regional_pb2.GetLiveRequestsRequest, context: Context
    ) -> regional_pb2.GetLiveRequestsResponse:
        if self._live_requests is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this brain keeps no requests")
        try:
            live = await self._live_requests(list(request.request_ids))
        except Invalid as wrong:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(wrong))
        return regional_pb2.GetLiveRequestsResponse(
            region_id=self._region_id,
            live_request_ids=[rid for rid in request.request_ids if rid in live.live],
            completed_request_ids=[rid for rid in request.request_ids if rid in live.completed],
        )

    @override
    async def ServeForwarded(
        self, request: regional_pb2.ServeForwardedRequest, context: Context
    ) -> regional_pb2.ServeForwardedResponse:
        serve = self.serve_forwarded
        if serve is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the brain is starting")
        answer = await serve(request.call, from_region=request.from_region)
        return regional_pb2.ServeForwardedResponse(answer=answer)

    def _request(self, text: str) -> PlacementRequest | str:
        """The request in `text`, or why it is not valid here."""
        try:
            placement = request_of(text)
            check_request(placement, self._live_map.map)
        except (RequestError, WireError) as wrong:
            return f"the request is not valid: {wrong}"
        return placement


def add_regional_service(server: grpc.aio.Server, servicer: RegionalServicer) -> str:
    """Serve `servicer` on `server`; the service's full name (for health and reflection)."""
    regional_pb2_grpc.add_RegionalBrainServiceServicer_to_server(servicer, server)
    return regional_pb2.DESCRIPTOR.services_by_name["RegionalBrainService"].full_name


def _route_view(route: national_pb2.SiteRoute) -> SiteRouteView:
    segments = [
        RouteSegmentView(
            kind=segment.kind,
            owner=segment.owner,
            latency_ms=segment.path.latency_ms,
            nodes=list(segment.path.nodes),
            links=list(segment.path.link_ids),
            free_gbps=least_gbps(list(segment.path.free_mbps)),
        )
        for segment in route.segments
    ]
    free = [mbps for segment in route.segments for mbps in segment.path.free_mbps]
    return SiteRouteView(latency_ms=route.latency_ms, free_gbps=least_gbps(free), segments=segments)


class _BlockedLinks:
    """`_blocked` for the requests of one call on one snapshot, computed once per distinct
    bandwidth need."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._by_need: dict[int, frozenset[int]] = {}

    def of(self, request: PlacementRequest) -> frozenset[int]:
        need = gbps_to_mbps(request.constraints.min_bandwidth_gbps)
        if need not in self._by_need:
            self._by_need[need] = _blocked(self._snapshot, request)
        return self._by_need[need]


def _blocked(snapshot: Snapshot, request: PlacementRequest) -> frozenset[int]:
    """Links without the bandwidth the request needs (nothing is owned elsewhere: 0 free)."""
    return _narrower_than(snapshot, gbps_to_mbps(request.constraints.min_bandwidth_gbps))


def _narrower_than(snapshot: Snapshot, mbps: int) -> frozenset[int]:
    """Links with less than `mbps` free on `snapshot` (none when `mbps` is 0)."""
    if mbps <= 0:
        return frozenset()
    return frozenset(np.flatnonzero(snapshot.residual_mbps < mbps).tolist())


def _free(snapshot: Snapshot, site: int, request: PlacementRequest) -> common_pb2.Compute:
    arrays = snapshot.arrays
    model = request.resources.accelerator.model if request.resources.accelerator else ""
    column = arrays.accelerator_column.get(model) if model else None
    return common_pb2.Compute(
        site_id=arrays.map.sites[site].id,
        cpu_m=int(snapshot.free_cpu_m[site]),
        mem_mib=int(snapshot.free_mem_mib[site]),
        storage_gib=int(snapshot.free_storage_gib[site]),
        accelerator_model=model or "",
        accelerator_milli=int(snapshot.free_acc[site, column]) if column is not None else 0,
    )


class AnnouncingWatch:
    """The brain's snapshot bookkeeping around a peer's ledger call, telling the replicas
    when capacity changed."""

    def __init__(self, live_map: LiveMap, replicas: Replicas) -> None:
        self._live_map = live_map
        self._replicas = replicas

    def begin_local_change(self) -> None:
        self._live_map.begin_local_change()

    def end_local_change(self, reservation: Reservation | None) -> None:
        self._live_map.end_local_change(reservation)
        if reservation is not None:
            self._replicas.announce_soon()

    def capacity_changed(self) -> None:
        self._replicas.peer_changed()


MAX_USE = 2**62
"""An amount of a quota's use the national brain may answer, at most."""


class NationalLink:
    """This regional brain's connection to the national brain, served by the replicas at
    `endpoints` (one or more "host:port", in the order of preference): it registers region
    `region_id`, reachable at `advertised_endpoint`, with every replica and reports
    `live_map`'s free capacity to each; its calls go to one replica, and on to the next when
    that one is unavailable (`rpc.failover`). `escalated` is told the answer of every
    escalation: `placed`, `rejected` or `unavailable` (None: nobody is)."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        settings: Settings,
        security: PeerSecurity,
        region_id: str,
        advertised_endpoint: str,
        live_map: LiveMap,
        escalated: Callable[[str], None] | None = None,
    ) -> None:
        self._escalated = escalated
        self._channels = [
            open_channel(endpoint, security=security, server_name="national")
            for endpoint in endpoints
        ]
        self._stubs = [national_pb2_grpc.NationalBrainServiceStub(c) for c in self._channels]
        self._national = Failover(self._stubs)
        self._region_id = region_id
        self._advertised_endpoint = advertised_endpoint
        self._live_map = live_map
        self._sequence = 0
        self._deadline_s = settings.call_deadline_s
        self._interval_s = settings.summary_interval_s
        self.registered = asyncio.Event()
        """Set while this region is registered with at least one replica."""
        self._registered_with: set[int] = set()
        self._part: tuple[ComputeNetworkMap, str, list[str], list[str]] | None = None

    @property
    def replicas_registered(self) -> int:
        """How many replicas have this region registered now."""
        return len(self._registered_with)

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()

    async def run(self) -> None:
        """Register with every replica and stream summaries to each, until cancelled."""
        await asyncio.gather(*(self._report(index) for index in range(len(self._stubs))))

    async def _report(self, index: int) -> None:
        """Register with replica `index`, then stream summaries to it (a new stream every
        SUMMARY_STREAM_S); after a failure, wait `summary_interval_s` and register again."""
        interval = self._interval_s
        stub = self._stubs[index]
        while True:
            try:
                await self._register(index)
                await stub.ReportSummaries(self._summaries(interval), timeout=SUMMARY_STREAM_S)
            except grpc.aio.AioRpcError as error:
                if (
                    index in self._registered_with
                    and error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
                ):
                    continue
                self._set_registered(index, False)
                log.warning(
                    "national brain (replica %d): %s (%s); retrying in %.1f s",
                    index + 1,
                    error.code().name,
                    error.details(),
                    interval,
                )
            await asyncio.sleep(interval)

    def _set_registered(self, index: int, registered: bool) -> None:
        if registered:
            self._registered_with.add(index)
        else:
            self._registered_with.discard(index)
        if self._registered_with:
            self.registered.set()
        else:
            self.registered.clear()

    async def escalate(self, request: PlacementRequest) -> Decision:
        """The national brain's decision for `request`; a rejection naming the cause when it
        cannot be reached."""
        decision, _ = await self.escalate_waiting(request, wait_until_s=0)
        return decision

    async def escalate_waiting(
        self, request: PlacementRequest, *, wait_until_s: int
    ) -> tuple[Decision, NationalPlan | None]:
        """The national brain's decision for `request` (a rejection naming the cause when it
        cannot be reached) and, for a request that waits until `wait_until_s` (0: it does
        not) and was not placed, the plan of its wait."""
        try:
            answer = await self._national.call(
                lambda stub: stub.PlaceCrossRegion(
                    national_pb2.PlaceCrossRegionRequest(
                        request_json=request_json(request),
                        source_region=self._region_id,
                        wait_until_s=wait_until_s,
                    ),
                    timeout=ESCALATION_DEADLINE_S,
                )
            )
        except grpc.aio.AioRpcError as error:
            if self._escalated is not None:
                self._escalated("unavailable")
            return _unavailable(request, error), None
        decision = Decision.model_validate_json(answer.decision_json)
        if self._escalated is not None:
            placed = decision.status is DecisionStatus.PLACED
            self._escalated("placed" if placed else "rejected")
        if not answer.HasField("plan"):
            return decision, None
        plan = answer.plan
        start = plan.estimated_start_s if 0 < plan.estimated_start_s <= MAX_EPOCH_S else None
        site = plan.site_id if plan.site_id in self._live_map.map.site_index else None
        return decision, NationalPlan(
            start_s=start if site else None,
            site_id=site if start else None,
            reason=plan.reason[:MAX_PLAN_REASON],
        )

    async def quote(self, request: PlacementRequest) -> NationalQuote:
        """The national brain's quote for `request` (QuoteCrossRegion); a rejection naming
        the cause, not reached, when it cannot be reached."""
        try:
            answer = await self._national.call(
                lambda stub: stub.QuoteCrossRegion(
                    national_pb2.QuoteCrossRegionRequest(
                        request_json=request_json(request), source_region=self._region_id
                    ),
                    timeout=ESCALATION_DEADLINE_S,
                )
            )
        except grpc.aio.AioRpcError as error:
            return NationalQuote(_unavailable(request, error), reached=False)
        return NationalQuote(Decision.model_validate_json(answer.decision_json), reached=True)

    async def site_routes(
        self, from_site: str, to_site: str, *, k: int, min_free_mbps: int
    ) -> list[SiteRouteView]:
        """The national brain's routes between two sites (GetSiteRoutes). Raises Invalid for
        what it refused, PeerUnavailable when it or an owner cannot be reached."""
        try:
            answer = await self._national.call(
                lambda stub: stub.GetSiteRoutes(
                    national_pb2.GetSiteRoutesRequest(
                        from_site_id=from_site,
                        to_site_id=to_site,
                        routes=k,
                        min_free_mbps=min_free_mbps,
                    ),
                    timeout=self._deadline_s * 3,
                )
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise Invalid(error.details() or "refused by the national brain") from None
            raise _national_unavailable(error) from error
        return [_route_view(route) for route in answer.routes]

    async def release(
        self, reservation_id: str, reason: str, *, keep_delivery: bool = False
    ) -> bool:
        """Release a cross-region reservation in every owner (with `keep_delivery`, but its
        delivery flows); True when the national brain held it. Raises PeerUnavailable when
        the national brain cannot be reached or does not answer in time (then nothing is
        known to have been released)."""
        try:
            answer = await self._national.call(
                lambda stub: stub.ReleaseCrossRegion(
                    national_pb2.ReleaseCrossRegionRequest(
                        reservation_id=reservation_id, reason=reason, keep_delivery=keep_delivery
                    ),
                    timeout=self._deadline_s * 3,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise _national_unavailable(error) from error
        return answer.released

    async def set_weight_matrix(self, matrix: WeightMatrix, *, actor: str) -> None:
        """Make `matrix` the federation's (SetWeightMatrix). Raises PeerUnavailable when the
        national brain cannot be reached or does not answer in time."""
        try:
            await self._national.call(
                lambda stub: stub.SetWeightMatrix(
                    national_pb2.SetWeightMatrixRequest(
                        matrix_json=matrix.model_dump_json(), region_id=self._region_id, actor=actor
                    ),
                    timeout=self._deadline_s,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise _national_unavailable(error) from error

    async def weight_matrix(self, *, known_digest: str) -> WeightMatrix | None:
        """The federation's weight matrix, or None when it is the one of `known_digest`
        (GetWeightMatrix). Raises PeerUnavailable when the national brain cannot be reached
        or sends what is not a weight matrix."""
        try:
            answer = await self._national.call(
                lambda stub: stub.GetWeightMatrix(
                    national_pb2.GetWeightMatrixRequest(known_digest=known_digest),
                    timeout=self._deadline_s,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise _national_unavailable(error) from error
        if not answer.matrix_json:
            return None
        try:
            return WeightMatrix.model_validate_json(answer.matrix_json)
        except ValidationError as wrong:
            raise PeerUnavailable(NATIONAL_PEER, "invalid_answer", str(wrong)) from None

    async def change_tenancy(self, change: TenancyChange, *, actor: str) -> TenancyChange:
        """Record `change` in the national brain (ChangeTenancy); the change as recorded.
        Raises NotFound, Conflict or Invalid with the national brain's words when it refused
        the change, PeerUnavailable when it cannot be reached, does not answer in time or
        answers what is not the change."""
        try:
            answer = await self._national.call(
                lambda stub: stub.ChangeTenancy(
                    national_pb2.ChangeTenancyRequest(
                        change_json=change_json(change), region_id=self._region_id, actor=actor
                    ),
                    timeout=self._deadline_s,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise _refusal(error) from error
        try:
            recorded = change_of(answer.change.change_json)
        except ValueError as wrong:
            raise PeerUnavailable(NATIONAL_PEER, "invalid_answer", str(wrong)) from None
        if recorded.model_copy(update={"at": None}) != change.model_copy(update={"at": None}):
            raise PeerUnavailable(NATIONAL_PEER, "invalid_answer", "another change recorded")
        return recorded

    async def national_quota_use(self, tenant_id: str) -> QuotaUsed:
        """What the tenant's reservations use of its national quota (GetNationalQuotaUse).
        Raises NotFound or Invalid with the national brain's words, PeerUnavailable when it
        cannot be reached or answers an amount out of [0, 2^62]."""
        try:
            answer = await self._national.call(
                lambda stub: stub.GetNationalQuotaUse(
                    national_pb2.GetNationalQuotaUseRequest(tenant_id=tenant_id),
                    timeout=self._deadline_s,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise _refusal(error) from error
        use = QuotaUsed(
            cpu_m=answer.used_cpu_m,
            mem_mib=answer.used_mem_mib,
            acc_milli=answer.used_accelerator_milli,
            mbps=answer.used_mbps,
            active_requests=answer.active_requests,
        )
        if not all(0 <= amount <= MAX_USE for amount in astuple(use)):
            raise PeerUnavailable(NATIONAL_PEER, "invalid_answer", f"amounts out of bounds: {use}")
        return use

    async def tenancy_since(self, version: int, *, limit: int) -> TenancyPage:
        """At most `limit` tenancy changes after `version` (GetTenancy). Raises
        PeerUnavailable when the national brain cannot be reached, or answers more changes
        than asked, versions out of order or out of range, or what is not a change."""
        try:
            answer = await self._national.call(
                lambda stub: stub.GetTenancy(
                    national_pb2.GetTenancyRequest(since_version=version, max_changes=limit),
                    timeout=self._deadline_s,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise _national_unavailable(error) from error
        try:
            return tenancy_page(answer, since=version, limit=limit)
        except ValueError as wrong:
            raise PeerUnavailable(NATIONAL_PEER, "invalid_answer", str(wrong)) from None

    async def put_priority_class(
        self, one: PriorityClass, *, default: bool, actor: str
    ) -> tuple[PriorityClasses, bool]:
        """Make `one` a class of the federation (PutPriorityClass); the federation's set and
        whether the class is new. Raises Conflict when the national brain refuses it, and
        PeerUnavailable when it cannot be reached, does not answer in time or answers what
        is not a set of classes."""
        try:
            answer = await self._national.call(
                lambda stub: stub.PutPriorityClass(
                    national_pb2.PutPriorityClassRequest(
                        priority_class=class_message(one),
                        default=default,
                        region_id=self._region_id,
                        actor=actor,
                    ),
                    timeout=self._deadline_s,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise _refusal(error) from error
        return _class_set(answer.classes), answer.created

    async def delete_priority_class(self, name: str, *, actor: str) -> PriorityClasses:
        """Delete the federation's class `name` (DeletePriorityClass); the federation's set.
        Raises NotFound or Conflict when the national brain refuses it, and PeerUnavailable
        as `put_priority_class`."""
        try:
            answer = await self._national.call(
                lambda stub: stub.DeletePriorityClass(
                    national_pb2.DeletePriorityClassRequest(
                        name=name, region_id=self._region_id, actor=actor
                    ),
                    timeout=self._deadline_s,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise _refusal(error) from error
        return _class_set(answer.classes)

    async def priority_classes(self, *, known_digest: str) -> PriorityClasses | None:
        """The federation's priority classes, or None when they are the ones of
        `known_digest` (GetPriorityClasses). Raises PeerUnavailable when the national brain
        cannot be reached or answers what is not a set of classes."""
        try:
            answer = await self._national.call(
                lambda stub: stub.GetPriorityClasses(
                    national_pb2.GetPriorityClassesRequest(known_digest=known_digest),
                    timeout=self._deadline_s,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise _national_unavailable(error) from error
        if answer.classes.digest == known_digest:
            return None
        return _class_set(answer.classes)

    async def forward(self, call: common_pb2.ForwardedCall) -> common_pb2.ForwardedAnswer:
        """The answer of the region the national brain hands `call` to (Forward). Raises
        Invalid or NotFound with the national brain's words when it refused the call, and
        PeerUnavailable when it cannot be reached, the region that must answer cannot
        (its words name that region), or the answer is out of bounds."""
        try:
            answer = await self._national.call(
                lambda stub: stub.Forward(
                    national_pb2.ForwardRequest(call=call, from_region=self._region_id),
                    timeout=FORWARD_DEADLINE_S,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise _refusal(error) from error
        try:
            return check_answer(answer.answer)
        except Invalid as wrong:
            raise PeerUnavailable(NATIONAL_PEER, "invalid_answer", str(wrong)) from None

    async def live_requests(self, region_id: str, request_ids: Sequence[str]) -> Liveness:
        """The live and the completed ones of `request_ids` in their source region
        `region_id`, asked through the national brain. Raises PeerUnavailable when it, or that
        region, cannot be asked."""
        try:
            answer = await self._national.call(
                lambda stub: stub.GetSourceLiveRequests(
                    national_pb2.GetSourceLiveRequestsRequest(
                        region_id=region_id, request_ids=list(request_ids)
                    ),
                    timeout=self._deadline_s * 2,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise _national_unavailable(error) from error
        return Liveness.among(
            request_ids, live=answer.live_request_ids, completed=answer.completed_request_ids
        )

    async def _register(self, index: int) -> None:
        self._set_registered(index, False)
        await self._stubs[index].RegisterRegion(
            national_pb2.RegisterRegionRequest(
                region_id=self._region_id,
                endpoint=self._advertised_endpoint,
                provinces=sorted(self._live_map.ownership.provinces),
            ),
            timeout=self._deadline_s,
        )
        self._set_registered(index, True)
        log.info("registered region %s with national replica %d", self._region_id, index + 1)

    def _map_part(self) -> tuple[str, list[str], list[str]]:
        """The digest and documents of this region's part of the map in use, made again
        only when the map was rebuilt."""
        cmap = self._live_map.map
        if self._part is None or self._part[0] is not cmap:
            part = RegionPart.of(cmap, self._region_id)
            sites, links = part.documents()
            self._part = (cmap, part.digest(), sites, links)
        _, digest, sites, links = self._part
        return digest, sites, links

    async def _summaries(self, interval: float) -> Any:
        """The summaries of one stream: each with the digest of this region's part of the
        map, and the part itself on the first and whenever the digest changed. A summary
        that cannot be made (the database down, say) is logged, once until one can be made
        again, and tried again after `interval`: the stream goes on. (An error raised here
        would end the stream with a cancellation, which would end the link for good.)"""
        sent = ""
        failing = False
        while True:
            try:
                summary = await self._summary()
            except Exception as error:
                if not failing:
                    log.warning(
                        "no summary for the national brain (%s); trying again every %.1f s",
                        error,
                        interval,
                    )
                failing = True
                await asyncio.sleep(interval)
                continue
            if failing:
                log.info("summaries for the national brain again")
                failing = False
            summary.map_digest, sites, links = self._map_part()
            if summary.map_digest != sent:
                summary.map_included = True
                summary.sites_json.extend(sites)
                summary.links_json.extend(links)
                sent = summary.map_digest
            yield national_pb2.ReportSummariesRequest(summary=summary)
            await asyncio.sleep(interval)

    async def _summary(self) -> national_pb2.RegionSummary:
        """This region's summary now, with the next sequence number."""
        self._sequence += 1
        # The room held for a waiting request shows as free: the national brain asks this
        # region for that request's candidates, which leave the room to it alone.
        held, _ = await self._live_map.held_snapshot()
        return summarise(
            self._live_map.ownership,
            self._region_id,
            held.free,
            self._sequence,
            in_use=held.seen_by(None, now_s=self._live_map.now()),
        )


def _unavailable(request: PlacementRequest, error: grpc.aio.AioRpcError) -> Decision:
    """The rejection of `request` when the national brain, asked for it, failed with `error`."""
    return Decision(
        request_id=request.id,
        status=DecisionStatus.REJECTED,
        policy=UNAVAILABLE_POLICY,
        reason=(
            "only the national brain can place it (no site of this region fits, it asks for the "
            "national optimum, or its tenant has a national quota) and the national brain is "
            "unavailable "
            f"({error.code().name.lower()}: {error.details()})"
        ),
    )


def _national_unavailable(error: grpc.aio.AioRpcError) -> PeerUnavailable:
    """The failed call `error` to the national brain, in the federation's words."""
    return PeerUnavailable(NATIONAL_PEER, error.code().name.lower(), error.details() or "")


_REFUSALS: dict[grpc.StatusCode, type[CnbrainError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.FAILED_PRECONDITION: Conflict,
    grpc.StatusCode.ALREADY_EXISTS: Conflict,
    grpc.StatusCode.INVALID_ARGUMENT: Invalid,
}


def _refusal(error: grpc.aio.AioRpcError) -> CnbrainError:
    """The national brain's refusal of a change in the federation's words (its details are
    its reason), or PeerUnavailable when it did not decide."""
    kind = _REFUSALS.get(error.code())
    if kind is None:
        return _national_unavailable(error)
    details = (error.details() or "refused by the national brain")[:MAX_PLAN_REASON]
    return kind(details)


def tenancy_page(answer: national_pb2.GetTenancyResponse, *, since: int, limit: int) -> TenancyPage:
    """The page in `answer` to a GetTenancy after version `since` for `limit` changes.
    Raises ValueError when it has more changes than asked, versions not increasing from
    above `since` or above its latest version, or a change that is not one."""
    latest = answer.latest_version
    if not 0 <= latest <= MAX_VERSION:
        raise ValueError(f"latest_version {latest} is out of range")
    if len(answer.changes) > limit:
        raise ValueError(f"{len(answer.changes)} changes, not at most {limit}")
    changes: list[tuple[int, TenancyChange]] = []
    previous = since
    for entry in answer.changes:
        if not previous < entry.version <= latest:
            raise ValueError(f"version {entry.version} does not follow {previous} up to {latest}")
        changes.append((entry.version, change_of(entry.change_json)))
        previous = entry.version
    return TenancyPage(changes=changes, latest_version=latest)


def _class_set(message: national_pb2.PriorityClassSet) -> PriorityClasses:
    """The set of classes the national brain sent; PeerUnavailable when it is not one."""
    try:
        return set_of(message)
    except WireError as wrong:
        raise PeerUnavailable(NATIONAL_PEER, "invalid_answer", str(wrong)) from None


def summarise(
    ownership: Ownership, region_id: str, snapshot: Snapshot, sequence: int, *, in_use: Snapshot
) -> national_pb2.RegionSummary:
    """Free capacity of region `region_id`'s sites in `snapshot`: by accelerator model and by
    site kind, the CPU price range, and the load of each province's gateway links; and the
    load of each of its sites as `in_use` shows it (what its capacity API and console show:
    the room held for waiting requests counts as used there)."""
    arrays = snapshot.arrays
    owned = ownership.sites
    cmap = arrays.map
    accelerators = [
        national_pb2.AcceleratorSummary(
            model=model,
            free=int(snapshot.free_acc[owned, column].sum()),
            total=int(arrays.cap_acc[owned, column].sum()),
        )
        for model, column in sorted(arrays.accelerator_column.items())
        if arrays.cap_acc[owned, column].sum() > 0
    ]
    kinds: dict[str, list[int]] = {}
    for i in np.flatnonzero(owned).tolist():
        kinds.setdefault(str(cmap.sites[i].kind), []).append(i)
    site_kinds = [
        national_pb2.SiteKindSummary(
            kind=kind,
            sites=len(sites),
            free_cpu_m=int(snapshot.free_cpu_m[sites].max()),
            free_mem_mib=int(snapshot.free_mem_mib[sites].max()),
        )
        for kind, sites in sorted(kinds.items())
    ]
    prices = arrays.price_cpu[owned]
    gateways = []
    for code in sorted(ownership.provinces):
        gateway = cmap.provinces[code].gateway
        at_gateway = [
            j
            for j, link in enumerate(cmap.links)
            if ownership.links[j] and gateway in (link.a, link.b)
        ]
        util = max(
            (
                1 - snapshot.residual_mbps[j] / arrays.link_cap_mbps[j]
                for j in at_gateway
                if arrays.link_cap_mbps[j] > 0
            ),
            default=0.0,
        )
        gateways.append(
            national_pb2.GatewayLoad(province=code, gateway=gateway, utilisation=float(util))
        )
    return national_pb2.RegionSummary(
        region_id=region_id,
        sequence=sequence,
        accelerators=accelerators,
        site_kinds=site_kinds,
        cpu_price_min=float(prices.min()) if len(prices) else 0.0,
        cpu_price_max=float(prices.max()) if len(prices) else 0.0,
        gateways=gateways,
        site_loads=site_load_messages(in_use, owned=owned),
    )
