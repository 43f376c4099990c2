"""LedgerService: a brain's own part of cross-brain reservations, over its database.

Each call is one database transaction for all the parts it carries (`local_ledger`). A part
may only touch this brain's own sites and links (`Ownership`), its flows included; anything
else is refused (that part, with the reason), so no brain ever writes a ledger it does not
own.
"""

import json
import logging
from collections.abc import Callable
from typing import Any

import grpc
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from typing_extensions import override

from cnbrain.federation.codec import WireError, claim_of, part_flows, part_window
from cnbrain.federation.local_ledger import (
    CapacityWatch,
    commit_parts,
    prepare_parts,
    release_parts,
)
from cnbrain.federation.metrics import LedgerPartMetrics
from cnbrain.federation.ownership import Ownership
from cnbrain.federation.steered_paths import Steered
from cnbrain.ledger.claim import Claim, FlowHold
from cnbrain.netmap.arrays import MapArrays
from cnbrain.storage.peer_ledger import Take
from cnbrain.v1 import ledger_pb2, ledger_pb2_grpc

log = logging.getLogger("cnbrain.federation")

Context = grpc.aio.ServicerContext[Any, Any]

MIN_TTL_MS = 100
MAX_TTL_MS = 600_000


class LedgerServicer(ledger_pb2_grpc.LedgerServiceServicer):
    """`view()` gives the current map arrays and ownership (they change when the map is
    reloaded). Every call is one database transaction for all its parts (`prepare_parts`,
    `commit_parts`, `release_parts`); a part that names something this brain does not own
    (in its flows too), lacks its ids or its window, or carries a malformed flow, is refused
    on its own. `take` takes the amounts and flows of the parts prepared
    (`peer_ledger.Take`; None: the ledger's own checks alone). With `metrics`, every part
    is counted there by step and outcome. With `steered`, the parts committed are steered in
    the data plane and those released are removed from it (`local_ledger.commit_parts`)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        view: Callable[[], tuple[MapArrays, Ownership]],
        watch: CapacityWatch,
        take: Take | None = None,
        metrics: LedgerPartMetrics | None = None,
        steered: Steered | None = None,
    ) -> None:
        self._steered = steered
        self._sessions = sessions
        self._view = view
        self._watch = watch
        self._take = take
        self._metrics = metrics

    @override
    async def Prepare(
        self, request: ledger_pb2.PrepareRequest, context: Context
    ) -> ledger_pb2.PrepareResponse:
        if not MIN_TTL_MS <= request.ttl_ms <= MAX_TTL_MS:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"ttl_ms must be within {MIN_TTL_MS}..{MAX_TTL_MS}, not {request.ttl_ms}",
            )
        arrays, ownership = self._view()
        reasons: list[str | None] = [_refusal(part, arrays, ownership) for part in request.parts]
        valid: list[Claim] = []
        flows: list[FlowHold] = []
        flows_of: dict[str, tuple[FlowHold, ...]] = {}
        for i, part in enumerate(request.parts):
            if reasons[i] is not None:
                continue
            held = part_flows(part)
            first = flows_of.get(part.reservation_id)
            if first is None:
                flows_of[part.reservation_id] = held
                flows += held
            elif first != held:
                reasons[i] = f"reservation {part.reservation_id!r} is given twice with other flows"
                continue
            valid.append(claim_of(part))
        outcomes = iter(
            await prepare_parts(
                self._sessions,
                valid,
                ttl_ms=request.ttl_ms,
                arrays=arrays,
                watch=self._watch,
                take=self._take,
                flows=flows,
            )
        )
        reasons = [next(outcomes) if reason is None else reason for reason in reasons]
        if self._metrics is not None:
            self._metrics.count("prepare", reasons)
        return ledger_pb2.PrepareResponse(
            results=[
                ledger_pb2.PrepareResult(
                    reservation_id=part.reservation_id, prepared=reason is None, reason=reason or ""
                )
                for part, reason in zip(request.parts, reasons, strict=True)
            ]
        )

    @override
    async def Commit(
        self, request: ledger_pb2.CommitRequest, context: Context
    ) -> ledger_pb2.CommitResponse:
        reasons: list[str | None] = []
        valid: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = []
        for entry in request.entries:
            try:
                decision = json.loads(entry.decision_json) if entry.decision_json else None
                placed = json.loads(entry.request_json) if entry.request_json else None
            except json.JSONDecodeError as exc:
                reasons.append(f"not JSON: {exc}")
                continue
            reasons.append(None)
            valid.append((entry.reservation_id, decision, placed))
        outcomes = iter(await commit_parts(self._sessions, valid, steered=self._steered))
        reasons = [next(outcomes) if reason is None else reason for reason in reasons]
        if self._metrics is not None:
            self._metrics.count("commit", reasons)
        return ledger_pb2.CommitResponse(
            results=[
                ledger_pb2.CommitResult(
                    reservation_id=entry.reservation_id,
                    committed=reason is None,
                    reason=reason or "",
                )
                for entry, reason in zip(request.entries, reasons, strict=True)
            ]
        )

    @override
    async def Release(
        self, request: ledger_pb2.ReleaseRequest, context: Context
    ) -> ledger_pb2.ReleaseResponse:
        released = await release_parts(
            self._sessions,
            list(request.reservation_ids),
            watch=self._watch,
            keep_delivery=request.keep_delivery,
            steered=self._steered,
        )
        if self._metrics is not None:
            self._metrics.released(released)
        return ledger_pb2.ReleaseResponse(released=released)


def _refusal(part: ledger_pb2.PartClaim, arrays: MapArrays, ownership: Ownership) -> str | None:
    """Why `part` cannot be taken here whatever the ledger holds, or None: no ids; a
    malformed window or flow (`part_window`, `part_flows`); a site or link, of the part or of
    a flow, this brain does not own."""
    if not part.reservation_id or not part.request_id:
        return "reservation_id and request_id are required"
    try:
        part_window(part)
        flows = part_flows(part)
    except WireError as malformed:
        return str(malformed)
    site_id = part.compute.site_id
    if site_id:
        index = arrays.map.site_index.get(site_id)
        if index is None or not ownership.sites[index]:
            return f"site {site_id!r} is not owned by {ownership.owner}"
    for link_id in part.link_ids:
        j = arrays.link_index.get(link_id)
        if j is None or not ownership.owns_link(j):
            return f"link {link_id!r} is not owned by {ownership.owner}"
    for i, flow in enumerate(flows):
        for link_id in flow.link_ids:
            j = arrays.link_index.get(link_id)
            if j is None or not ownership.owns_link(j):
                return f"flows[{i}]: link {link_id!r} is not owned by {ownership.owner}"
    return None


def add_ledger_service(server: grpc.aio.Server, servicer: LedgerServicer) -> str:
    """Serve `servicer` on `server`; the service's full name (for health and reflection)."""
    ledger_pb2_grpc.add_LedgerServiceServicer_to_server(servicer, server)
    return ledger_pb2.DESCRIPTOR.services_by_name["LedgerService"].full_name
