"""NationalBrainService: region registration and summaries (with the regions' parts of the
map and the load of their sites, checked on receipt), cross-region placement (and the plan
of a cross-region request that waits) and quotes, the federation's weight matrix and tenancy
(a change recorded, the changes after a version), and tenants' calls one region took that
another answers (`forwarding`)."""

import re
from collections.abc import AsyncIterator
from typing import Any, Final

import grpc
from pydantic import ValidationError
from typing_extensions import override

from cnbrain.domain.bounds import MAX_EPOCH_S
from cnbrain.domain.errors import Conflict, Invalid, NotFound
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.tenancy import ID_PATTERN, MAX_VERSION, change_json, change_of
from cnbrain.federation.class_wire import class_of, set_message
from cnbrain.federation.codec import WireError, request_of
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.site_loads import site_loads_of
from cnbrain.federation.summary_numbers import check_summary_numbers
from cnbrain.national.forwarding import ForwardCalls
from cnbrain.national.map_sync import MapSync
from cnbrain.national.orchestrator import CrossRegionPlacer
from cnbrain.national.policy import FederationPolicy
from cnbrain.national.regions import RegionDirectory, owned_provinces, owned_sites
from cnbrain.national.settings import NationalSettings
from cnbrain.national.site_routes import SiteRoutes
from cnbrain.national.tenancy import FederationTenancy
from cnbrain.national.waiting import PlaceOrPlan
from cnbrain.placement.errors import RequestError
from cnbrain.placement.request_check import check_request
from cnbrain.placement.weights import WeightMatrix
from cnbrain.scheduling.classes import check_class_name
from cnbrain.storage.known_regions import MAX_ENDPOINT
from cnbrain.telemetry.tenant import note_tenant
from cnbrain.v1 import national_pb2, national_pb2_grpc

Context = grpc.aio.ServicerContext[Any, Any]

MAX_ACTOR = 64
"""Characters of an actor the audit log keeps."""

ENDPOINT: Final = re.compile(r"^[^\s\x00-\x1f\x7f]+:[0-9]{1,5}$")
"""A region's endpoint: host:port, the host without spaces or control characters."""

MAX_LIVE_IDS = 1000
"""Request ids one GetSourceLiveRequests may name (a region's GetLiveRequests takes as many)."""

MAX_TENANCY_CHANGES = 1000
"""Changes one GetTenancy answers at most."""

TENANCY_CHANGES = 500
"""Changes one GetTenancy answers when the caller does not say."""


class NationalServicer(national_pb2_grpc.NationalBrainServiceServicer):
    def __init__(
        self,
        *,
        settings: NationalSettings,
        live_map: LiveMap,
        directory: RegionDirectory,
        placer: CrossRegionPlacer,
        waiting: PlaceOrPlan,
        map_sync: MapSync,
        policy: FederationPolicy,
        tenancy: FederationTenancy,
        forward: ForwardCalls,
        site_routes: SiteRoutes,
    ) -> None:
        self._settings = settings
        self._live_map = live_map
        self._directory = directory
        self._placer = placer
        self._waiting = waiting
        self._map_sync = map_sync
        self._policy = policy
        self._tenancy = tenancy
        self._forward = forward
        self._site_routes = site_routes

    @override
    async def RegisterRegion(
        self, request: national_pb2.RegisterRegionRequest, context: Context
    ) -> national_pb2.RegisterRegionResponse:
        owned = owned_provinces(self._live_map.map, request.region_id)
        if owned is None:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"unknown region {request.region_id!r}"
            )
        claimed = set(request.provinces)
        if claimed != owned:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"region {request.region_id!r} owns provinces {sorted(owned)}, "
                f"not {sorted(claimed)}",
            )
        endpoint = request.endpoint
        if not endpoint:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "endpoint is required")
        if len(endpoint) > MAX_ENDPOINT or not ENDPOINT.fullmatch(endpoint):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"endpoint: must be host:port of at most {MAX_ENDPOINT} characters, "
                "without spaces or control characters",
            )
        await self._directory.register(request.region_id, endpoint, owned)
        return national_pb2.RegisterRegionResponse(
            national_id="national", summary_interval_ms=self._settings.summary_interval_ms
        )

    @override
    async def ReportSummaries(
        self,
        request_iterator: AsyncIterator[national_pb2.ReportSummariesRequest],
        context: Context,
    ) -> national_pb2.ReportSummariesResponse:
        received = 0
        async for message in request_iterator:
            summary = message.summary
            region = self._directory.get(summary.region_id)
            if region is None:
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"region {summary.region_id!r} has not registered",
                )
            if summary.map_included:
                await self._map_sync.apply(
                    region.id, region.provinces, list(summary.sites_json), list(summary.links_json)
                )
            else:
                await self._map_sync.retry(region.id)
            # Checked on the map with the part this summary carried applied.
            try:
                check_summary_numbers(summary)
                loads = site_loads_of(
                    summary.site_loads,
                    sites=owned_sites(self._live_map.map, region.provinces),
                    field="summary.site_loads",
                )
            except WireError as wrong:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(wrong))
            if not self._directory.report(summary, loads):
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"region {summary.region_id!r} has not registered",
                )
            received += 1
        return national_pb2.ReportSummariesResponse(received=received)

    @override
    async def PlaceCrossRegion(
        self, request: national_pb2.PlaceCrossRegionRequest, context: Context
    ) -> national_pb2.PlaceCrossRegionResponse:
        placement = await self._checked(request.request_json, request.source_region, context)
        wait_until = request.wait_until_s
        if not 0 <= wait_until <= MAX_EPOCH_S:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"wait_until_s must be within [0, {MAX_EPOCH_S}], not {wait_until}",
            )
        if placement.moves_data and not wait_until:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "wait_until_s: a request with flows waits in its source region's queue and is"
                " planned over time; it needs its latest start",
            )
        if not wait_until:
            decision = await self._placer.place(placement, request.source_region)
            return national_pb2.PlaceCrossRegionResponse(decision_json=decision.model_dump_json())
        decision, plan = await self._waiting(
            placement, request.source_region, wait_until_s=wait_until
        )
        answer = national_pb2.PlaceCrossRegionResponse(decision_json=decision.model_dump_json())
        if plan is not None:
            answer.plan.CopyFrom(
                national_pb2.WaitPlan(
                    estimated_start_s=plan.start_s or 0,
                    site_id=plan.site_id or "",
                    reason=plan.reason,
                )
            )
        return answer

    @override
    async def SetWeightMatrix(
        self, request: national_pb2.SetWeightMatrixRequest, context: Context
    ) -> national_pb2.SetWeightMatrixResponse:
        try:
            matrix = WeightMatrix.model_validate_json(request.matrix_json)
        except ValidationError as wrong:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not a weight matrix: {wrong}")
        if request.region_id not in self._directory:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"region {request.region_id!r} has not registered",
            )
        actor = f"{request.region_id}:{request.actor}"[:MAX_ACTOR]
        await self._policy.set_weight_matrix(matrix, actor=actor)
        return national_pb2.SetWeightMatrixResponse(digest=matrix.digest())

    @override
    async def GetWeightMatrix(
        self, request: national_pb2.GetWeightMatrixRequest, context: Context
    ) -> national_pb2.GetWeightMatrixResponse:
        matrix = self._live_map.engine.config.weight_matrix
        digest = matrix.digest()
        if request.known_digest == digest:
            return national_pb2.GetWeightMatrixResponse(digest=digest)
        return national_pb2.GetWeightMatrixResponse(
            digest=digest, matrix_json=matrix.model_dump_json()
        )

    @override
    async def ChangeTenancy(
        self, request: national_pb2.ChangeTenancyRequest, context: Context
    ) -> national_pb2.ChangeTenancyResponse:
        try:
            change = change_of(request.change_json)
        except ValueError as wrong:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"change_json: not a tenancy change: {wrong}"
            )
        actor = await self._actor(request.region_id, request.actor, context)
        version, recorded = await self._tenancy.change(change, actor=actor)
        return national_pb2.ChangeTenancyResponse(
            change=national_pb2.TenancyChange(version=version, change_json=change_json(recorded))
        )

    @override
    async def GetTenancy(
        self, request: national_pb2.GetTenancyRequest, context: Context
    ) -> national_pb2.GetTenancyResponse:
        if not 0 <= request.since_version <= MAX_VERSION:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"since_version must be within [0, {MAX_VERSION}], not {request.since_version}",
            )
        if not 0 <= request.max_changes <= MAX_TENANCY_CHANGES:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"max_changes must be within [0, {MAX_TENANCY_CHANGES}], not {request.max_changes}",
            )
        changes, latest = await self._tenancy.since(
            request.since_version, limit=request.max_changes or TENANCY_CHANGES
        )
        return national_pb2.GetTenancyResponse(
            changes=[
                national_pb2.TenancyChange(version=version, change_json=change_json(change))
                for version, change in changes
            ],
            latest_version=latest,
        )

    @override
    async def GetNationalQuotaUse(
        self, request: national_pb2.GetNationalQuotaUseRequest, context: Context
    ) -> national_pb2.GetNationalQuotaUseResponse:
        if re.fullmatch(ID_PATTERN, request.tenant_id) is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "tenant_id: not a tenant id")
        used = await self._tenancy.quota_used(request.tenant_id)
        if used is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"tenant {request.tenant_id!r} does not exist"
            )
        return national_pb2.GetNationalQuotaUseResponse(
            used_cpu_m=used.cpu_m,
            used_mem_mib=used.mem_mib,
            used_accelerator_milli=used.acc_milli,
            used_mbps=used.mbps,
            active_requests=used.active_requests,
        )

    @override
    async def PutPriorityClass(
        self, request: national_pb2.PutPriorityClassRequest, context: Context
    ) -> national_pb2.PutPriorityClassResponse:
        try:
            one = class_of(request.priority_class)
        except WireError as wrong:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(wrong))
        actor = await self._actor(request.region_id, request.actor, context)
        try:
            classes, created = await self._policy.put_priority_class(
                one, default=request.default, actor=actor
            )
        except Conflict as refused:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(refused))
        return national_pb2.PutPriorityClassResponse(created=created, classes=set_message(classes))

    @override
    async def DeletePriorityClass(
        self, request: national_pb2.DeletePriorityClassRequest, context: Context
    ) -> national_pb2.DeletePriorityClassResponse:
        try:
            check_class_name(request.name)
        except Invalid as wrong:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(wrong))
        actor = await self._actor(request.region_id, request.actor, context)
        try:
            classes = await self._policy.delete_priority_class(request.name, actor=actor)
        except NotFound as missing:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(missing))
        except Conflict as refused:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(refused))
        return national_pb2.DeletePriorityClassResponse(classes=set_message(classes))

    @override
    async def GetPriorityClasses(
        self, request: national_pb2.GetPriorityClassesRequest, context: Context
    ) -> national_pb2.GetPriorityClassesResponse:
        classes = await self._policy.priority_classes()
        return national_pb2.GetPriorityClassesResponse(
            classes=set_message(classes, known_digest=request.known_digest)
        )

    async def _actor(self, region_id: str, actor: str, context: Context) -> str:
        """Who made a change of the federation's policy or tenancy, for the audit log:
        `region_id`'s `actor`. The call ends UNAVAILABLE, not FAILED_PRECONDITION (a refused
        change), when that region is not known: it may register and try again."""
        if region_id not in self._directory:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"region {region_id!r} has not registered"
            )
        return f"{region_id}:{actor}"[:MAX_ACTOR]

    @override
    async def QuoteCrossRegion(
        self, request: national_pb2.QuoteCrossRegionRequest, context: Context
    ) -> national_pb2.QuoteCrossRegionResponse:
        placement = await self._checked(request.request_json, request.source_region, context)
        decision = await self._placer.quote(placement, request.source_region)
        return national_pb2.QuoteCrossRegionResponse(decision_json=decision.model_dump_json())

    @override
    async def GetSiteRoutes(
        self, request: national_pb2.GetSiteRoutesRequest, context: Context
    ) -> national_pb2.GetSiteRoutesResponse:
        try:
            routes = await self._site_routes(
                request.from_site_id,
                request.to_site_id,
                k=request.routes,
                min_free_mbps=request.min_free_mbps,
            )
        except Invalid as wrong:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{wrong.field}: {wrong}")
        except (PeerUnavailable, WireError) as why:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(why))
        return national_pb2.GetSiteRoutesResponse(routes=routes)

    @override
    async def ReleaseCrossRegion(
        self, request: national_pb2.ReleaseCrossRegionRequest, context: Context
    ) -> national_pb2.ReleaseCrossRegionResponse:
        released = await self._placer.release(
            request.reservation_id, request.reason, keep_delivery=request.keep_delivery
        )
        return national_pb2.ReleaseCrossRegionResponse(released=released)

    @override
    async def GetSourceLiveRequests(
        self, request: national_pb2.GetSourceLiveRequestsRequest, context: Context
    ) -> national_pb2.GetSourceLiveRequestsResponse:
        if len(request.request_ids) > MAX_LIVE_IDS:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"request_ids: at most {MAX_LIVE_IDS}, not {len(request.request_ids)}",
            )
        try:
            live = await self._directory.live_requests(
                request.region_id,
                list(request.request_ids),
                deadline_s=self._settings.call_deadline_s,
            )
        except PeerUnavailable as why:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(why))
        return national_pb2.GetSourceLiveRequestsResponse(
            live_request_ids=[rid for rid in request.request_ids if rid in live.live],
            completed_request_ids=[rid for rid in request.request_ids if rid in live.completed],
        )

    @override
    async def Forward(
        self, request: national_pb2.ForwardRequest, context: Context
    ) -> national_pb2.ForwardResponse:
        answer = await self._forward(request.call, from_region=request.from_region)
        return national_pb2.ForwardResponse(answer=answer)

    async def _checked(
        self, request_json: str, source_region: str, context: Context
    ) -> PlacementRequest:
        """The request in `request_json`, valid on the map, from a registered region; else
        the call ends INVALID_ARGUMENT or FAILED_PRECONDITION. Its tenant is the call's, for
        the logs and the span."""
        try:
            placement = request_of(request_json)
            check_request(placement, self._live_map.map)
        except (RequestError, WireError) as wrong:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(wrong))
        note_tenant(placement.tenant)
        if source_region not in self._directory:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"region {source_region!r} has not registered"
            )
        return placement


def add_national_service(server: grpc.aio.Server, servicer: NationalServicer) -> str:
    """Serve `servicer` on `server`; the service's full name (for health and reflection)."""
    national_pb2_grpc.add_NationalBrainServiceServicer_to_server(servicer, server)
    return national_pb2.DESCRIPTOR.services_by_name["NationalBrainService"].full_name
