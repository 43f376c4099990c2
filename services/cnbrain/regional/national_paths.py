"""A regional brain's calls to the national brain's NationalPathsService (`paths.proto`): an
operator's report of a backbone link's state, and this region's outcomes of re-routing its
segments of other regions' requests, relayed to their source regions. The calls go to the
national brain's replicas at `endpoints`, in the order of preference, and on to the next
while one is unavailable (`rpc.failover`)."""

from datetime import UTC, datetime

import grpc

from cnbrain.domain.errors import CnbrainError, Invalid, NotFound
from cnbrain.domain.rerouting import SegmentRerouting
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.rerouting_wire import rerouting_message
from cnbrain.rpc.client import open_channel
from cnbrain.rpc.failover import Failover
from cnbrain.rpc.security import PeerSecurity
from cnbrain.v1 import paths_pb2, paths_pb2_grpc

NATIONAL_PEER = "the national brain"


class NationalPaths:
    """NationalPathsService of the national brain at `endpoints` ("host:port", one per
    replica), for region `region_id`; every call under `deadline_s`."""

    def __init__(
        self,
        endpoints: list[str],
        *,
        security: PeerSecurity,
        region_id: str,
        deadline_s: float,
    ) -> None:
        self._channels = [
            open_channel(endpoint, security=security, server_name="national")
            for endpoint in endpoints
        ]
        self._national = Failover(
            [paths_pb2_grpc.NationalPathsServiceStub(channel) for channel in self._channels]
        )
        self._region_id = region_id
        self._deadline_s = deadline_s

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()

    async def report_link_state(
        self, link_id: str, *, down: bool, reason: str, actor: str
    ) -> datetime:
        """Have the national brain keep this report of backbone link `link_id`, made by this
        region's `actor`; when it kept it. Raises NotFound when it is not a backbone link of
        the national brain's map, Invalid for a field it refuses, PeerUnavailable when it
        cannot be reached or does not answer in time (nothing is known to have changed)."""
        try:
            answer = await self._national.call(
                lambda stub: stub.ReportLinkState(
                    paths_pb2.ReportLinkStateRequest(
                        region_id=self._region_id,
                        actor=actor,
                        link_id=link_id,
                        down=down,
                        reason=reason,
                    ),
                    timeout=self._deadline_s,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise _refusal(error) from None
        return datetime.fromtimestamp(answer.reported_at_ms / 1000, UTC)

    async def relay(self, source_region: str, news: SegmentRerouting) -> bool:
        """Have the national brain tell region `source_region` what became of a segment
        (`news`) of its request; whether it holds the request. Raises Invalid when the
        outcome is refused, PeerUnavailable when the national brain or that region cannot
        be reached."""
        try:
            answer = await self._national.call(
                lambda stub: stub.RelayRerouting(
                    paths_pb2.RelayReroutingRequest(
                        source_region=source_region, rerouting=rerouting_message(news)
                    ),
                    timeout=self._deadline_s * 2,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise _refusal(error) from None
        return answer.noted


def _refusal(error: grpc.aio.AioRpcError) -> CnbrainError:
    """The national brain's refusal in the federation's words (its details are its reason),
    or PeerUnavailable when it did not decide."""
    details = error.details() or "refused by the national brain"
    if error.code() is grpc.StatusCode.NOT_FOUND:
        return NotFound(details)
    if error.code() is grpc.StatusCode.INVALID_ARGUMENT:
        return Invalid(details)
    return PeerUnavailable(NATIONAL_PEER, error.code().name.lower(), details)
