"""NationalPathsService: operators' reports of the backbone links' states, taken by the
regional brains (kept as each link's last report, audited; the national brain's re-routing
takes a link reported down for down, `federation.link_states`, and new placements keep off
it), and the regions' outcomes of re-routing their segments, relayed to the requests' source
regions (`note_at`, which the national brain's own re-routing of backbone segments uses
too)."""

from typing import Any

import grpc
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from typing_extensions import override

from cnbrain.domain.bounds import MAX_LINK_REASON, has_control_characters
from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.domain.rerouting import SegmentRerouting
from cnbrain.federation.codec import WireError
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.live_map import LiveMap
from cnbrain.federation.rerouting_wire import rerouting_message, rerouting_of
from cnbrain.national.regions import RegionDirectory, unavailable
from cnbrain.storage import audit, link_states
from cnbrain.v1 import paths_pb2, paths_pb2_grpc

Context = grpc.aio.ServicerContext[Any, Any]

MAX_LINK_ID = 260
"""Characters of a link id (two node ids joined by "--")."""


class NationalPathsServicer(paths_pb2_grpc.NationalPathsServiceServicer):
    """Reports kept in the national brain's database (`sessions`) for the backbone links of
    `live_map`'s map; outcomes relayed to the regions of `directory`, each call under
    `deadline_s`."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        live_map: LiveMap,
        directory: RegionDirectory,
        deadline_s: float,
    ) -> None:
        self._sessions = sessions
        self._live_map = live_map
        self._directory = directory
        self._deadline_s = deadline_s

    @override
    async def ReportLinkState(
        self, request: paths_pb2.ReportLinkStateRequest, context: Context
    ) -> paths_pb2.ReportLinkStateResponse:
        for field, value, most in (
            ("link_id", request.link_id, MAX_LINK_ID),
            ("reason", request.reason, MAX_LINK_REASON),
            ("actor", request.actor, link_states.MAX_ACTOR),
        ):
            if len(value) > most or has_control_characters(value):
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{field}: at most {most} characters, without control characters",
                )
        if request.region_id not in self._directory:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"region {request.region_id!r} has not registered"
            )
        cmap = self._live_map.map
        index = self._live_map.engine.arrays.link_index.get(request.link_id)
        if index is None or cmap.links[index].owner != NATIONAL_OWNER:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"link {request.link_id!r} is not a backbone link of the national brain's map",
            )
        state = link_states.DOWN if request.down else link_states.UP
        actor = f"{request.region_id}:{request.actor}"[: link_states.MAX_ACTOR]
        async with self._sessions.begin() as session:
            kept = await link_states.report(
                session, link_id=request.link_id, state=state, reason=request.reason, actor=actor
            )
            await audit.record(
                session,
                actor=actor,
                action="link.state_reported",
                object_type="link",
                object_id=request.link_id,
                detail={"state": state, "reason": request.reason},
            )
        self._live_map.capacity_changed()
        return paths_pb2.ReportLinkStateResponse(reported_at_ms=int(kept.at.timestamp() * 1000))

    @override
    async def RelayRerouting(
        self, request: paths_pb2.RelayReroutingRequest, context: Context
    ) -> paths_pb2.RelayReroutingResponse:
        try:
            news = rerouting_of(request.rerouting)
        except WireError as wrong:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(wrong))
        try:
            noted = await note_at(
                self._directory, request.source_region, news, deadline_s=self._deadline_s
            )
        except PeerUnavailable as why:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(why))
        return paths_pb2.RelayReroutingResponse(noted=noted)


async def note_at(
    directory: RegionDirectory, region_id: str, news: SegmentRerouting, *, deadline_s: float
) -> bool:
    """Tell region `region_id` (the source of `news`'s request) what became of the segment
    (its NoteRerouting); whether it holds the request. Raises PeerUnavailable when the
    region has not registered or does not answer, Invalid when it refuses the outcome."""
    region = directory.get(region_id)
    if region is None:
        raise PeerUnavailable(region_id, "unavailable", "not registered")
    stub = paths_pb2_grpc.RegionalPathsServiceStub(region.channel)
    try:
        answer = await stub.NoteRerouting(
            paths_pb2.NoteReroutingRequest(rerouting=rerouting_message(news)), timeout=deadline_s
        )
    except grpc.aio.AioRpcError as error:
        if error.code() is grpc.StatusCode.INVALID_ARGUMENT:
            raise WireError(error.details() or "refused", field="rerouting") from None
        raise unavailable(region_id, error) from error
    return answer.noted


def add_national_paths_service(server: grpc.aio.Server, servicer: NationalPathsServicer) -> str:
    """Serve `servicer` on `server`; the service's full name (for health and reflection)."""
    paths_pb2_grpc.add_NationalPathsServiceServicer_to_server(servicer, server)
    return paths_pb2.DESCRIPTOR.services_by_name["NationalPathsService"].full_name
