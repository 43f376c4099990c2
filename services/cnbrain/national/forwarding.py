"""Forwarded calls: the national brain hands a tenant's call that one region took to the
region that must answer it (`docs/federation.md`, "Any brain, any request").

- A submission or quote goes to the region that owns its source province on the national
  brain's map; a group, to the region that owns every member's.
- A read or cancel of a request goes to every other registered region at once: a region
  that holds the request answers it (2xx, or its own refusal, such as 409 for a request
  that has ended); when none does, the regions' own answer (404, or 403 from a region that
  does not know the caller) is the answer, unless one of them could not be asked, which
  makes the call unavailable (the request may be there).
- A query (one region's page of the listing or of usage) goes to the region it names; one
  of a region that never registered is NotFound (it holds nothing of the federation's).
"""

import asyncio
from collections.abc import Callable

from cnbrain.domain.errors import Invalid, NotFound
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.forward_queries import QUERIES
from cnbrain.federation.forward_wire import (
    CANCEL,
    SERVE_DEADLINE_S,
    WITH_BODY,
    check_answer,
    check_call,
    check_group_region,
    provinces_of,
)
from cnbrain.national.regions import Region, RegionDirectory
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.v1 import common_pb2

NOT_FOUND = 404
FORBIDDEN = 403
NOT_HELD = frozenset({FORBIDDEN, NOT_FOUND})
"""The answers of a region that does not hold the request (or cannot tell: 403)."""


Counted = Callable[[int, str], None]
"""Told of every forwarded call: its operation (`ForwardedOperation`) and its outcome: the
class of the status answered (`2xx`, `4xx`, `5xx`), or `invalid`, `not_found`,
`unavailable` or `error` when it raised."""


class ForwardCalls:
    """`map()` is the national brain's map; a read asks each region within `read_deadline_s`;
    `counted` is told of every call (None: nobody is)."""

    def __init__(
        self,
        directory: RegionDirectory,
        *,
        map: Callable[[], ComputeNetworkMap],
        read_deadline_s: float,
        counted: Counted | None = None,
    ) -> None:
        self._directory = directory
        self._map = map
        self._read_deadline_s = read_deadline_s
        self._counted = counted

    async def __call__(
        self, call: common_pb2.ForwardedCall, *, from_region: str
    ) -> common_pb2.ForwardedAnswer:
        """The answer of the region that must answer `call`, taken by region `from_region`.
        Raises Invalid for a call out of bounds (or a province no region owns, or one of
        `from_region` itself; a query of `from_region` itself), NotFound for a read when no
        other region is registered or a query of a region that never registered, and
        PeerUnavailable when `from_region` is not registered, or a region that must answer
        has not registered or does not answer."""
        if self._counted is None:
            return await self._forward(call, from_region)
        try:
            answer = await self._forward(call, from_region)
        except Exception as error:
            self._counted(call.operation, _outcome_of(error))
            raise
        self._counted(call.operation, f"{answer.status // 100}xx")
        return answer

    async def _forward(
        self, call: common_pb2.ForwardedCall, from_region: str
    ) -> common_pb2.ForwardedAnswer:
        body = check_call(call)
        if from_region not in self._directory:
            raise PeerUnavailable(
                f"region {from_region!r}", "unregistered", "the region has not registered"
            )
        if call.operation in WITH_BODY:
            assert body is not None
            return await self._to_owner(call, provinces_of(call.operation, body), from_region)
        if call.operation in QUERIES:
            return await self._to_region(call, from_region)
        return await self._read(call, from_region)

    async def _to_region(
        self, call: common_pb2.ForwardedCall, from_region: str
    ) -> common_pb2.ForwardedAnswer:
        if call.region_id == from_region:
            raise Invalid(f"region {from_region!r} answers its own queries", field="region_id")
        region = self._directory.get(call.region_id)
        if region is None:
            # Registrations are kept across restarts: a region not here never joined, and
            # holds nothing of the federation's (as for a read, asked of the registered).
            raise NotFound(f"region {call.region_id!r} has not registered")
        return await self._serve(region, call, from_region, deadline_s=self._read_deadline_s)

    async def _to_owner(
        self, call: common_pb2.ForwardedCall, provinces: list[tuple[str, str]], from_region: str
    ) -> common_pb2.ForwardedAnswer:
        regions: list[str] = []
        for field, province in provinces:
            known = self._map().provinces.get(province)
            if known is None:
                raise Invalid(f"no region owns province {province!r}", field=field)
            if known.region == from_region:
                raise Invalid(f"province {province!r} is region {from_region!r}'s own", field=field)
            if regions:
                check_group_region(regions[0], field, province, known.region)
            regions.append(known.region)
        owner = self._directory.get(regions[0])
        if owner is None:
            raise PeerUnavailable(
                f"region {regions[0]!r}", "unregistered", "the region has not registered"
            )
        return await self._serve(owner, call, from_region, deadline_s=SERVE_DEADLINE_S)

    async def _read(
        self, call: common_pb2.ForwardedCall, from_region: str
    ) -> common_pb2.ForwardedAnswer:
        regions = sorted(
            (r for r in self._directory.all() if r.id != from_region), key=lambda r: r.id
        )
        if not regions:
            raise NotFound(f"request {call.request_id!r} does not exist")
        # A cancel releases what the request holds, maybe in other regions: as a submission.
        deadline_s = SERVE_DEADLINE_S if call.operation == CANCEL else self._read_deadline_s
        answers = await asyncio.gather(
            *(self._serve(r, call, from_region, deadline_s=deadline_s) for r in regions),
            return_exceptions=True,
        )
        failed: list[str] = []
        held: list[common_pb2.ForwardedAnswer] = []
        refusals: list[common_pb2.ForwardedAnswer] = []
        for region, answer in zip(regions, answers, strict=True):
            if isinstance(answer, PeerUnavailable):
                failed.append(region.id)
            elif isinstance(answer, BaseException):
                raise answer
            elif 200 <= answer.status < 300:
                return answer
            elif answer.status not in NOT_HELD:
                held.append(answer)
            else:
                refusals.append(answer)
        if held:
            return held[0]
        if failed:
            raise PeerUnavailable(
                "regions " + ", ".join(repr(r) for r in failed),
                "unavailable",
                f"request {call.request_id!r} is not in the regions that answered, "
                "and these could not be asked",
            )
        forbidden = [a for a in refusals if a.status == FORBIDDEN]
        return (forbidden or refusals)[0]

    async def _serve(
        self,
        region: Region,
        call: common_pb2.ForwardedCall,
        from_region: str,
        *,
        deadline_s: float,
    ) -> common_pb2.ForwardedAnswer:
        """`region`'s answer to `call`, checked. Raises PeerUnavailable when it does not
        answer in `deadline_s`, refuses the call, or answers out of bounds."""
        try:
            answer = await region.serve_forwarded(call, from_region, deadline_s=deadline_s)
        except PeerUnavailable as down:
            raise PeerUnavailable(f"region {region.id!r}", down.cause, down.details) from None
        try:
            checked = check_answer(answer)
        except Invalid as wrong:
            raise PeerUnavailable(f"region {region.id!r}", "invalid_answer", str(wrong)) from None
        if checked.region_id != region.id:
            raise PeerUnavailable(
                f"region {region.id!r}", "invalid_answer", f"answered as {checked.region_id!r}"
            )
        return checked


def _outcome_of(error: Exception) -> str:
    """The outcome (`Counted`) of a forwarded call that raised `error`."""
    if isinstance(error, Invalid):
        return "invalid"
    if isinstance(error, NotFound):
        return "not_found"
    if isinstance(error, PeerUnavailable):
        return "unavailable"
    return "error"
