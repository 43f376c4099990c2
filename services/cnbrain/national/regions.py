"""The regions the national brain knows: where they answer, and their latest summaries.
Where they answer is kept in the national brain's database too (`KnownRegions`), so that a
restarted national brain reaches them at once, before they register again."""

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import grpc

from cnbrain.domain.bounds import MAX_NAME_LENGTH
from cnbrain.domain.request import PlacementRequest
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.site_loads import SiteLoads
from cnbrain.ledger.audit import Liveness
from cnbrain.netmap.arrays import demand_units
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.rpc.client import open_channel
from cnbrain.rpc.security import PeerSecurity
from cnbrain.v1 import common_pb2, ledger_pb2_grpc, national_pb2, regional_pb2, regional_pb2_grpc

log = logging.getLogger("cnbrain.national")


def owned_sites(cmap: ComputeNetworkMap, provinces: frozenset[str]) -> frozenset[str]:
    """The ids of the sites of `cmap` in `provinces`."""
    return frozenset(site.id for site in cmap.sites if site.province in provinces)


def owned_provinces(cmap: ComputeNetworkMap, region_id: str) -> frozenset[str] | None:
    """The provinces of region `region_id` on `cmap`; None for a region the map has not."""
    if region_id not in cmap.regions:
        return None
    return frozenset(code for code, p in cmap.provinces.items() if p.region == region_id)


class KnownRegions(Protocol):
    """Where the directory's registrations are kept (`national.known_regions`)."""

    async def save(self, region_id: str, endpoint: str, provinces: frozenset[str]) -> None:
        """Record that region `region_id` answers at `endpoint` and owns `provinces`."""

    async def load(self) -> list[tuple[str, str, frozenset[str]]]:
        """Every region recorded, as (id, endpoint, provinces)."""


@dataclass(slots=True)
class Region:
    """A registered region: its provinces, its channel with the stubs of its brain and
    ledger services, and its latest summary (with the load of its sites it carried, as
    checked on receipt: `site_loads`, by site id)."""

    id: str
    endpoint: str
    provinces: frozenset[str]
    channel: grpc.aio.Channel
    brain: "regional_pb2_grpc.RegionalBrainServiceAsyncStub"
    ledger: "ledger_pb2_grpc.LedgerServiceAsyncStub"
    summary: national_pb2.RegionSummary | None = None
    summary_at: float = field(default=0.0)
    site_loads: Mapping[str, float] = field(default_factory=dict)
    dropped_sites: frozenset[str] = frozenset()
    """The site ids its summaries named lately that are not the region's on this map."""

    async def source_segments(
        self, requests_json: Sequence[str], *, paths: int, deadline_s: float
    ) -> regional_pb2.GetSourceSegmentsResponse:
        """The region's source segments for every request (GetSourceSegments). Raises
        PeerUnavailable when it does not answer in `deadline_s`."""
        try:
            return await self.brain.GetSourceSegments(
                regional_pb2.GetSourceSegmentsRequest(requests_json=requests_json, paths=paths),
                timeout=deadline_s,
            )
        except grpc.aio.AioRpcError as error:
            raise unavailable(self.id, error) from error

    async def candidates(
        self, requests_json: Sequence[str], *, sites: int, paths: int, deadline_s: float
    ) -> regional_pb2.GetCandidatesResponse:
        """The region's candidate sites for every request (GetCandidates). Raises
        PeerUnavailable when it does not answer in `deadline_s`."""
        try:
            return await self.brain.GetCandidates(
                regional_pb2.GetCandidatesRequest(
                    requests_json=requests_json, max_sites=sites, paths_per_site=paths
                ),
                timeout=deadline_s,
            )
        except grpc.aio.AioRpcError as error:
            raise unavailable(self.id, error) from error

    async def timelines(
        self,
        site_ids: Sequence[str],
        link_ids: Sequence[str],
        *,
        request_id: str,
        request_json: str = "",
        planned_gangs: Sequence[regional_pb2.PlannedGang] = (),
        deadline_s: float,
    ) -> regional_pb2.GetTimelinesResponse:
        """The free amount over time of the region's resources among those named, for the
        waiting request `request_id` (GetTimelines; with `request_json`, also when the nodes
        of its sites hold the request's gang, around `planned_gangs`). Raises
        PeerUnavailable when it does not answer in `deadline_s`."""
        try:
            return await self.brain.GetTimelines(
                regional_pb2.GetTimelinesRequest(
                    site_ids=site_ids,
                    link_ids=link_ids,
                    request_id=request_id,
                    request_json=request_json,
                    planned_gangs=planned_gangs,
                ),
                timeout=deadline_s,
            )
        except grpc.aio.AioRpcError as error:
            raise unavailable(self.id, error) from error

    async def site_segments(
        self,
        site_ids: Sequence[str],
        pairs: Sequence[tuple[str, str]],
        *,
        paths: int,
        min_free_mbps: int,
        deadline_s: float,
        access_nodes: Sequence[str] = (),
        access_sites: Sequence[tuple[str, str]] = (),
    ) -> regional_pb2.GetSiteSegmentsResponse:
        """The region's segments of its sites `site_ids` (gateway to site), its paths between
        the sites of each pair of one of its provinces, its segments of its `access_nodes`
        (node to gateway), and its paths from an access node to a site of its province
        (GetSiteSegments). Raises PeerUnavailable when it does not answer in `deadline_s`."""
        try:
            return await self.brain.GetSiteSegments(
                regional_pb2.GetSiteSegmentsRequest(
                    site_ids=site_ids,
                    pairs=[regional_pb2.SitePair(from_site_id=a, to_site_id=b) for a, b in pairs],
                    paths=paths,
                    min_free_mbps=min_free_mbps,
                    access_nodes=access_nodes,
                    access_sites=[
                        regional_pb2.AccessSite(access_node=a, site_id=b) for a, b in access_sites
                    ],
                ),
                timeout=deadline_s,
            )
        except grpc.aio.AioRpcError as error:
            raise unavailable(self.id, error) from error

    async def make_room(
        self, request_json: str, site_ids: Sequence[str], *, deadline_s: float
    ) -> regional_pb2.MakeRoomResponse:
        """Ask the region to make room by preemption for the request on one of `site_ids`
        (MakeRoom). Raises PeerUnavailable when it does not answer in `deadline_s`."""
        try:
            return await self.brain.MakeRoom(
                regional_pb2.MakeRoomRequest(request_json=request_json, site_ids=site_ids),
                timeout=deadline_s,
            )
        except grpc.aio.AioRpcError as error:
            raise unavailable(self.id, error) from error

    async def live_requests(self, request_ids: Sequence[str], *, deadline_s: float) -> Liveness:
        """The live and the completed ones of `request_ids` in the region (GetLiveRequests).
        Raises PeerUnavailable when it does not answer in `deadline_s`."""
        try:
            answer = await self.brain.GetLiveRequests(
                regional_pb2.GetLiveRequestsRequest(request_ids=request_ids), timeout=deadline_s
            )
        except grpc.aio.AioRpcError as error:
            raise unavailable(self.id, error) from error
        return Liveness.among(
            request_ids, live=answer.live_request_ids, completed=answer.completed_request_ids
        )

    async def serve_forwarded(
        self, call: common_pb2.ForwardedCall, from_region: str, *, deadline_s: float
    ) -> common_pb2.ForwardedAnswer:
        """The region's answer to a tenant's call region `from_region` took
        (ServeForwarded), unchecked. Raises PeerUnavailable when it does not answer in
        `deadline_s` or refuses the call."""
        try:
            answer = await self.brain.ServeForwarded(
                regional_pb2.ServeForwardedRequest(call=call, from_region=from_region),
                timeout=deadline_s,
            )
        except grpc.aio.AioRpcError as error:
            raise unavailable(self.id, error) from error
        return answer.answer


def unavailable(region_id: str, error: grpc.aio.AioRpcError) -> PeerUnavailable:
    """The failed call `error` to region `region_id`, in the federation's words."""
    return PeerUnavailable(region_id, error.code().name.lower(), error.details() or "")


class RegionDirectory:
    """Registered regions by id. Registering again (a restarted region brain) replaces the
    endpoint and channel. With `known`, every new or changed registration is recorded there
    before it is taken, and `restore` takes the recorded ones back."""

    def __init__(self, security: PeerSecurity, *, known: KnownRegions | None = None) -> None:
        self._security = security
        self._known = known
        self._regions: dict[str, Region] = {}

    async def restore(self, owned: Callable[[str], frozenset[str] | None]) -> list[str]:
        """Take back the registrations recorded in `known` (none yet has a summary), each
        with the provinces `owned` gives its region now; a region `owned` does not know
        (None) is left out. The ids taken."""
        if self._known is None:
            return []
        taken: list[str] = []
        for region_id, endpoint, _ in await self._known.load():
            provinces = owned(region_id)
            if provinces is None:
                log.warning("region %r is recorded but not on the map; left out", region_id)
                continue
            await self._take(region_id, endpoint, provinces)
            taken.append(region_id)
        return taken

    def __contains__(self, region_id: str) -> bool:
        return region_id in self._regions

    def get(self, region_id: str) -> Region | None:
        return self._regions.get(region_id)

    async def live_requests(
        self, region_id: str, request_ids: Sequence[str], *, deadline_s: float
    ) -> Liveness:
        """The live and the completed ones of `request_ids` in region `region_id`. Raises
        PeerUnavailable when it has not registered or does not answer in `deadline_s`."""
        region = self._regions.get(region_id)
        if region is None:
            raise PeerUnavailable(region_id, "unregistered", "the region has not registered")
        return await region.live_requests(request_ids, deadline_s=deadline_s)

    def all(self) -> list[Region]:
        return list(self._regions.values())

    async def register(self, region_id: str, endpoint: str, provinces: frozenset[str]) -> Region:
        """Region `region_id` answers at `endpoint` and owns `provinces` (recorded in
        `known` first when new or changed: when that raises, nothing changes)."""
        old = self._regions.get(region_id)
        if old is not None and old.endpoint == endpoint and old.provinces == provinces:
            return old
        if self._known is not None:
            await self._known.save(region_id, endpoint, provinces)
        if old is not None and old.endpoint == endpoint:
            old.provinces = provinces
            return old
        return await self._take(region_id, endpoint, provinces)

    async def _take(self, region_id: str, endpoint: str, provinces: frozenset[str]) -> Region:
        """Region `region_id` at `endpoint`, on a new channel (the one it replaces closed)."""
        old = self._regions.get(region_id)
        channel = open_channel(endpoint, security=self._security, server_name=region_id)
        region = Region(
            id=region_id,
            endpoint=endpoint,
            provinces=provinces,
            channel=channel,
            brain=regional_pb2_grpc.RegionalBrainServiceStub(channel),
            ledger=ledger_pb2_grpc.LedgerServiceStub(channel),
        )
        self._regions[region_id] = region
        if old is not None:
            await old.channel.close()
        return region

    def report(self, summary: national_pb2.RegionSummary, sites: SiteLoads) -> bool:
        """Keep `summary`, with the load of the region's sites checked from it (`sites`), if
        it is newer than the region's last; False for an unknown region. Site ids named that
        are not the region's are logged whenever they change."""
        region = self._regions.get(summary.region_id)
        if region is None:
            return False
        if sites.dropped != region.dropped_sites:
            region.dropped_sites = sites.dropped
            if sites.dropped:
                named = ", ".join(repr(s[:MAX_NAME_LENGTH]) for s in sorted(sites.dropped)[:5])
                log.warning(
                    "region %s: the load of %d sites that are not its own on this map left out: %s",
                    region.id,
                    len(sites.dropped),
                    named,
                )
        if region.summary is None or summary.sequence > region.summary.sequence:
            region.summary = summary
            region.summary_at = time.monotonic()
            region.site_loads = sites.loads
        return True

    def choose(self, request: PlacementRequest, n: int, *, exclude: set[str]) -> list[Region]:
        """Up to `n` regions that may have a site for `request`, most promising first.

        A region whose summary shows too few free accelerators of the requested model, or no
        kind of site with the CPU and memory, is left out; a region without a summary yet is
        kept, last. The rest are ordered by their lowest CPU price, then their gateway load.
        """
        want = demand_units(request.resources)
        model, count = want.accelerator_model, want.accelerator_milli
        cpu_m, mem_mib = want.cpu_m, want.mem_mib
        fitting: list[tuple[tuple[float, float], Region]] = []
        unknown: list[Region] = []
        for region in self._regions.values():
            if region.id in exclude:
                continue
            summary = region.summary
            if summary is None:
                unknown.append(region)
                continue
            if model is not None:
                free = {a.model: a.free for a in summary.accelerators}
                if free.get(model, 0) < count:
                    continue
            if not any(
                k.free_cpu_m >= cpu_m and k.free_mem_mib >= mem_mib for k in summary.site_kinds
            ):
                continue
            load = max((g.utilisation for g in summary.gateways), default=0.0)
            fitting.append(((summary.cpu_price_min, load), region))
        fitting.sort(key=lambda item: (item[0], item[1].id))
        return ([r for _, r in fitting] + sorted(unknown, key=lambda r: r.id))[:n]

    async def close(self) -> None:
        for region in self._regions.values():
            await region.channel.close()
        self._regions.clear()
