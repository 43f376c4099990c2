"""The federation planner: pure functions from what the regions answered to the view the
engine decides on, and from a decision to each owner's part of its reservation.

No I/O: the placer (`national.orchestrator`) asks the regions and runs the engine, the
coordinator (`national.coordinator`) reserves the parts."""

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from cnbrain.domain.decision import FEDERATION_POLICY, Decision, DecisionStatus, SegmentKind
from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.domain.request import PlacementRequest
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.ledger.claim import Claim, FlowHold, claim_from, window_of
from cnbrain.ledger.nodes import PoolSummary
from cnbrain.ledger.reservation import Reservation
from cnbrain.ledger.snapshot import Snapshot, all_free
from cnbrain.netmap.arrays import MapArrays
from cnbrain.routing.paths import GraphPath


class FreeCompute(Protocol):
    """A candidate site's free compute as its region reported it (`accelerator_model`
    empty: none)."""

    @property
    def cpu_m(self) -> int: ...

    @property
    def mem_mib(self) -> int: ...

    @property
    def storage_gib(self) -> int: ...

    @property
    def accelerator_model(self) -> str: ...

    @property
    def accelerator_milli(self) -> int: ...


@dataclass(slots=True)
class Answers:
    """What the regions said about one request in one attempt: the source access node and
    segments, each candidate site's destination segments and free compute (by site index),
    the free bandwidth of every province link they named (by link index), and the regions
    asked."""

    access_node: str
    source: list[GraphPath]
    destinations: dict[int, list[GraphPath]]
    free: dict[int, FreeCompute]
    residual: dict[int, int]
    regions: list[str]
    nodes: dict[int, tuple[PoolSummary, ...]] = field(default_factory=dict)
    """The node pools of candidate sites that have them, as their regions summarised them."""


@dataclass(frozen=True, slots=True)
class Part:
    """One owner's part of a reservation: `claim`, and the `flows` it holds besides, each
    over its own window, all of `claim`'s reservation and on links `owner` owns."""

    owner: str
    claim: Claim
    flows: tuple[FlowHold, ...] = ()


@dataclass(slots=True)
class Plan:
    """A placed decision of an attempt (`item`: its request's position in the attempt), its
    reservation and the owners' parts of it."""

    item: int
    decision: Decision
    reservation: Reservation
    parts: list[Part]


class AttemptError(Exception):
    """This attempt cannot go on; the message says why, `region` is the one to leave out."""

    def __init__(self, message: str, region: str | None = None) -> None:
        super().__init__(message)
        self.region = region


def composed(backbone: Snapshot, answers: Sequence[Answers]) -> Snapshot:
    """Free capacity as the regions reported it for their candidates, the national brain's
    own (`backbone`) for the backbone, nothing anywhere else."""
    arrays = backbone.arrays
    n = arrays.n_sites
    cpu, mem, storage = (np.zeros(n, dtype=np.int64) for _ in range(3))
    acc = np.zeros_like(arrays.cap_acc)
    residual = np.where(arrays.link_backbone, backbone.residual_mbps, 0)
    nodes = dict(all_free(arrays))
    for answer in answers:
        nodes.update(answer.nodes)
        for site, free in answer.free.items():
            cpu[site], mem[site], storage[site] = free.cpu_m, free.mem_mib, free.storage_gib
            column = arrays.accelerator_column.get(free.accelerator_model)
            if column is not None:
                acc[site, column] = free.accelerator_milli
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
        nodes=nodes,
    )


def segments(
    answers: Sequence[Answers],
) -> tuple[dict[str, list[GraphPath]], dict[int, list[GraphPath]]]:
    """The source segments by access node and the destination segments by site index of
    all `answers`, each list without repeats (same links) and fastest first."""
    sources: dict[str, list[GraphPath]] = {}
    destinations: dict[int, list[GraphPath]] = {}
    for answer in answers:
        _merge(sources.setdefault(answer.access_node, []), answer.source)
        for site, paths in answer.destinations.items():
            _merge(destinations.setdefault(site, []), paths)
    return sources, destinations


def parts(
    request: PlacementRequest,
    decision: Decision,
    reservation: Reservation,
    arrays: MapArrays,
    *,
    start_s: int,
    national_quota: bool = False,
) -> list[Part]:
    """One part per owner of the decision's segments, in segment order: the destination's
    compute and links, the backbone's links, the source's links and the tenant's quota. An
    owner of both the source and the destination segment (another province of the same
    region) has one part with both. With `national_quota` (the tenant has one), the national
    brain's part counts the request against it too, and there is one (counting it alone,
    last) when no segment is the backbone's. Every part holds the same window: the request's
    duration from epoch second `start_s`."""
    assert decision.path is not None and decision.site is not None
    window = window_of(start_s=start_s, duration_hours=request.duration_hours)
    whole = claim_from(reservation, arrays=arrays, tenant_id=request.tenant, window=window)
    links_only = whole.without_compute()
    owners: dict[str, tuple[bool, bool, list[str]]] = {}
    for segment in decision.path.segments:
        destination, source, links = owners.get(segment.owner, (False, False, []))
        owners[segment.owner] = (
            destination or segment.kind is SegmentKind.DESTINATION,
            source or segment.kind is SegmentKind.SOURCE,
            links + [hop.link for hop in segment.hops],
        )
    if national_quota:
        owners.setdefault(NATIONAL_OWNER, (False, False, []))
    found: list[Part] = []
    for owner, (destination, source, links) in owners.items():
        national = national_quota and owner == NATIONAL_OWNER
        claim = replace(
            whole if destination or source or national else links_only,
            site_id=whole.site_id if destination else None,
            link_ids=tuple(links) if reservation.mbps else (),
            counts_quota=source or national,
        )
        found.append(Part(owner=owner, claim=claim))
    return found


def owners(decision: dict[str, object] | None) -> list[str]:
    """The owners of a stored decision's segments, in segment order (the national brain
    alone when it has no path)."""
    if decision is None:
        return [NATIONAL_OWNER]
    parsed = Decision.model_validate(decision)
    if parsed.path is None:
        return [NATIONAL_OWNER]
    return list(dict.fromkeys(s.owner for s in parsed.path.segments))


def annotated(
    decision: Decision,
    *,
    reservation_id: str,
    regions: list[str],
    batch: int,
    timings_ms: dict[str, float],
) -> Decision:
    """`decision` with its reservation id, the regions asked and the federation's timings."""
    noted = _noted(
        decision,
        timings_ms=timings_ms,
        notes=(
            f"candidates asked of regions {', '.join(regions)}",
            f"placed in a batch of {batch} cross-region requests",
        ),
    )
    return noted.model_copy(update={"reservation_id": reservation_id})


QUOTED_NOTE = "quoted by the national brain: nothing was prepared or reserved in any owner"
"""The note of every placed decision the national brain quotes."""


def quoted(decision: Decision, *, regions: list[str], timings_ms: dict[str, float]) -> Decision:
    """`decision` as the national brain's quote: the regions asked, the federation's timings
    and `QUOTED_NOTE`; no reservation id."""
    return _noted(
        decision,
        timings_ms=timings_ms,
        notes=(f"candidates asked of regions {', '.join(regions)}", QUOTED_NOTE),
    )


def _noted(decision: Decision, *, timings_ms: dict[str, float], notes: tuple[str, ...]) -> Decision:
    """`decision` with `timings_ms` (rounded) and `notes` added to its explanation."""
    explanation = decision.explanation
    if explanation is None:
        return decision
    return decision.model_copy(
        update={
            "explanation": explanation.model_copy(
                update={
                    "timings_ms": {
                        **explanation.timings_ms,
                        **{k: round(v, 3) for k, v in timings_ms.items()},
                    },
                    "notes": (*explanation.notes, *notes),
                }
            )
        }
    )


def rejected(request: PlacementRequest, reason: str) -> Decision:
    """The federation's rejection of `request`, for `reason`, made before any engine
    decision (or after its parts were refused)."""
    return Decision(
        request_id=request.id,
        status=DecisionStatus.REJECTED,
        policy=FEDERATION_POLICY,
        reason=f"no region could place it: {reason}",
    )


def engine_rejected(decision: Decision, notes: Sequence[str]) -> Decision:
    """The engine's rejection `decision` on the regions' composed view, as the federation's:
    its reason says no region could place it, and its explanation (which sites each filter
    excluded, and why) carries the `notes` of earlier attempts."""
    explanation = decision.explanation
    if explanation is not None and notes:
        explanation = explanation.model_copy(update={"notes": (*explanation.notes, *notes)})
    reason = decision.reason or "no site can take it"
    if explanation is None and notes:
        reason = "; ".join([reason, *notes])
    return decision.model_copy(
        update={"reason": f"no region could place it: {reason}", "explanation": explanation}
    )


def reason_of(error: BaseException) -> str:
    """Why a call to an owner failed, in an attempt's notes."""
    if isinstance(error, PeerUnavailable):
        return f"{error.cause}: {error.details}"
    return f"{type(error).__name__}: {error}"


def _merge(into: list[GraphPath], paths: Sequence[GraphPath]) -> None:
    """Append the paths of `paths` that `into` does not have yet (same links)."""
    known = {p.links for p in into}
    for path in paths:
        if path.links not in known:
            known.add(path.links)
            into.append(path)
    into.sort(key=lambda p: p.latency_ms)
