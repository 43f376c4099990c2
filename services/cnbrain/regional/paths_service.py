"""RegionalPathsService: what the other owners of the segments of this region's requests'
paths tell it, through the national brain (`paths.proto`): each outcome of re-routing a
segment is noted on its request (`regional.rerouted_segments.SegmentNotes`)."""

from typing import Any

import grpc
from typing_extensions import override

from cnbrain.domain.errors import Invalid
from cnbrain.federation.codec import WireError
from cnbrain.federation.rerouting_wire import rerouting_of
from cnbrain.regional.rerouted_segments import SegmentNotes
from cnbrain.v1 import paths_pb2, paths_pb2_grpc

Context = grpc.aio.ServicerContext[Any, Any]


class RegionalPathsServicer(paths_pb2_grpc.RegionalPathsServiceServicer):
    """Notes each outcome with `notes`."""

    def __init__(self, notes: SegmentNotes) -> None:
        self._notes = notes

    @override
    async def NoteRerouting(
        self, request: paths_pb2.NoteReroutingRequest, context: Context
    ) -> paths_pb2.NoteReroutingResponse:
        try:
            noted = await self._notes(rerouting_of(request.rerouting))
        except (WireError, Invalid) as wrong:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(wrong))
        return paths_pb2.NoteReroutingResponse(noted=noted)


def add_regional_paths_service(server: grpc.aio.Server, servicer: RegionalPathsServicer) -> str:
    """Serve `servicer` on `server`; the service's full name (for health and reflection)."""
    paths_pb2_grpc.add_RegionalPathsServiceServicer_to_server(servicer, server)
    return paths_pb2.DESCRIPTOR.services_by_name["RegionalPathsService"].full_name
