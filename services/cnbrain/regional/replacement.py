"""Placing a request again, on another site, when its site's scheduler would not take its job.

The engine decides on the brain's snapshot with the request's own reservation given back and
the failed site showing nothing free; then one transaction releases the old reservation,
takes the new one, stores the new decision, moves the request to the new site (its state
stays) and queues its next attempt there. If no other site fits (or the quota, or capacity
that keeps changing, stand in the way), one transaction releases the reservation and fails the
request with the reason. Either way the request never holds two reservations, nor none while
it is placed.

Only this brain's own sites are tried: a federated brain does not escalate a failover to the
national brain, and a request placed across regions is not placed again (it fails, and its
parts are released through the national brain).
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

import anyio
import numpy as np
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.decision import Decision, DecisionStatus, SegmentKind
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.states import ENDED_ATTEMPT, RUNNABLE, RequestState
from cnbrain.ledger.claim import Claim, claim_from, reservation_of
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.regional.brain import Brain
from cnbrain.regional.job_outcomes import SYSTEM, finish_request, held_parts
from cnbrain.storage import audit, jobs, ledger_store, requests
from cnbrain.storage.jobs import Job

log = logging.getLogger("cnbrain.regional")


@dataclass(frozen=True, slots=True)
class Failover:
    """Where the request went: `site` (None: it failed) and why."""

    site: str | None
    reason: str


class BackendKind:
    """The kind of scheduler ("slurm", "simulator") of a site, from the brain's map."""

    def __init__(self, brain: Brain) -> None:
        self._brain = brain

    def __call__(self, site_id: str) -> str:
        cmap = self._brain.placement.map
        index = cmap.site_index.get(site_id)
        return cmap.sites[index].execution.kind if index is not None else jobs.SIMULATOR_KIND


async def place_elsewhere(
    brain: Brain,
    request: PlacementRequest,
    *,
    last: Job,
    backend_of: BackendKind,
) -> Failover:
    """Place `request` again without `last.site_id` and queue attempt `last.attempt + 1`
    there, or fail it. `last` is its attempt that was not submitted; `backend_of` names the
    kind of scheduler of a site. Nothing happens (and the site is None, with a reason) when
    the request moved on meanwhile (another instance settled it, or it was cancelled)."""
    why = f"attempt {last.attempt} on site {last.site_id} was not submitted: {last.message}"
    async with brain.sessions() as session:
        if await held_parts(session, request_id=request.id):
            return await _fail(
                brain,
                request,
                last,
                f"{why}; it was placed across regions, which only a new submission does again",
            )
    attempts = brain.settings.placement_attempts
    for _ in range(attempts):
        decision, fresh, held = await _decide(brain, request, last.site_id)
        if decision.status is DecisionStatus.REJECTED or not _local_enough(brain, decision):
            if not fresh:
                brain.capacity_changed()
                continue
            other = decision.reason or "only sites of another region fit"
            return await _fail(brain, request, last, f"{why}; no other site can take it: {other}")
        outcome = await _move(brain, request, last, decision, held, why, backend_of)
        if outcome is not None:
            return outcome
    return await _fail(
        brain, request, last, f"{why}; capacity kept changing during {attempts} attempts"
    )


def _local_enough(brain: Brain, decision: Decision) -> bool:
    """A federated brain reserves only paths inside its own region (one local segment)."""
    if not brain.federated or decision.path is None:
        return True
    return all(s.kind is SegmentKind.LOCAL for s in decision.path.segments)


async def _decide(
    brain: Brain, request: PlacementRequest, failed_site: str
) -> tuple[Decision, bool, list[Claim]]:
    """A decision without `failed_site`, on the snapshot with the request's own reservations
    given back; whether the snapshot was read just now; those reservations."""
    snapshot, fresh = await brain.snapshot()
    engine = brain.placement.engine
    if snapshot.arrays is not engine.arrays:
        brain.capacity_changed()
        snapshot, fresh = await brain.snapshot()
        engine = brain.placement.engine
    async with brain.sessions() as session:
        held = await ledger_store.held_claims(session, request_id=request.id)
    view = _without_site(_given_back(snapshot, held), failed_site)
    async with brain.plan_lock:
        decision = await anyio.to_thread.run_sync(
            lambda: engine.place(request, reserve=False, snapshot=view)
        )
    return decision, fresh, held


def _given_back(snapshot: Snapshot, held: Sequence[Claim]) -> Snapshot:
    """`snapshot` with what `held` takes on its map given back (claims on sites it does not
    show are left out, and so are the links it does not show)."""
    arrays: MapArrays = snapshot.arrays
    for claim in held:
        if claim.site_id not in arrays.map.site_index:
            continue
        on_map = tuple(link for link in claim.link_ids if link in arrays.link_index)
        reservation = reservation_of(replace(claim, link_ids=on_map), arrays=arrays)
        snapshot = snapshot.adjusted(reservation, taken=False)
    return snapshot


def _without_site(snapshot: Snapshot, site_id: str) -> Snapshot:
    """`snapshot` with nothing free on `site_id`."""
    index = snapshot.arrays.map.site_index.get(site_id)
    if index is None:
        return snapshot

    def cleared(values: np.ndarray) -> np.ndarray:
        values = values.copy()
        values[index] = 0
        return values

    return Snapshot.of_free(
        snapshot.arrays,
        version=snapshot.version,
        free_cpu_m=cleared(snapshot.free_cpu_m),
        free_mem_mib=cleared(snapshot.free_mem_mib),
        free_storage_gib=cleared(snapshot.free_storage_gib),
        free_acc=cleared(snapshot.free_acc),
        residual_mbps=snapshot.residual_mbps,
    )


async def _move(
    brain: Brain,
    request: PlacementRequest,
    last: Job,
    decision: Decision,
    held: Sequence[Claim],
    why: str,
    backend_of: BackendKind,
) -> Failover | None:
    """One transaction: the old reservation for the new one, the request on the new site,
    its next attempt queued. None when capacity changed meanwhile (decide again)."""
    engine = brain.placement.engine
    reservation = engine.reservation_for(request, decision)
    claim = claim_from(reservation, arrays=engine.arrays, tenant_id=request.tenant)
    decision = decision.model_copy(update={"reservation_id": reservation.id})
    site = str(decision.site)
    reason = f"{why}; placed again on site {site}"
    try:
        async with brain.changes.begin() as (session, change):
            if not await _still_stalled(session, request.id, last.attempt):
                return Failover(site=None, reason="settled meanwhile")
            change.free()  # the cached snapshot cannot follow a move: it is forgotten
            for old in held:
                await ledger_store.release(session, reservation_id=old.reservation_id)
            await ledger_store.reserve_many(session, claims=[claim])
            await requests.save_decisions(session, {request.id: decision.model_dump(mode="json")})
            await jobs.move_request_to_site(
                session, request_id=request.id, site_id=site, reason=reason
            )
            await jobs.queue_attempt(
                session,
                request_id=request.id,
                tenant_id=request.tenant,
                attempt=last.attempt + 1,
                site_id=site,
                backend=backend_of(site),
                message=f"placed again after attempt {last.attempt} on site {last.site_id}",
            )
            await audit.record(
                session,
                actor=SYSTEM,
                tenant_id=request.tenant,
                action="request.placed_again",
                object_type="request",
                object_id=request.id,
                detail={"from": last.site_id, "to": site, "why": why},
            )
    except ledger_store.CapacityConflict:
        return None
    except ledger_store.QuotaExceeded as exceeded:
        return await _fail(
            brain, request, last, f"{why}; the tenant's quota of {exceeded.resource} is used up"
        )
    log.info("request %s: placed again on %s after %s", request.id, site, last.site_id)
    return Failover(site=site, reason=reason)


async def _still_stalled(session: AsyncSession, request_id: str, last: int) -> bool:
    """Lock the request; True while it may run and `last` is its latest attempt, ended."""
    record = await requests.get_request(
        session, tenant_id=None, request_id=request_id, for_update=True
    )
    if record is None or record.state not in RUNNABLE:
        return False
    attempts = await jobs.attempts_of(session, request_id=request_id)
    return bool(attempts) and attempts[-1].attempt == last and attempts[-1].state in ENDED_ATTEMPT


async def _fail(brain: Brain, request: PlacementRequest, last: Job, reason: str) -> Failover:
    """Fail the request with `reason` and release what it holds."""
    async with brain.sessions.begin() as session:
        record = await requests.get_request(
            session, tenant_id=None, request_id=request.id, for_update=True
        )
        attempts = await jobs.attempts_of(session, request_id=request.id)
        if record is None or not attempts or attempts[-1].attempt != last.attempt:
            return Failover(site=None, reason="settled meanwhile")
        moved = await finish_request(
            session,
            request_id=request.id,
            tenant_id=request.tenant,
            state=RequestState.FAILED,
            reason=reason,
        )
    if moved:
        brain.capacity_changed()
        await brain.announce("capacity")
    return Failover(site=None, reason=reason)
