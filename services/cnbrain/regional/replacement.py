"""Placing a request again, on another site, when its site's scheduler would not take its job.

The brain's decider (the one the request use cases decide with) decides on the brain's
snapshot with the request's own reservation given back and the failed site showing nothing
free; then one unit of work releases the old reservation, takes the new one, stores the new
decision, moves the request to the new site (its state stays) and queues its next attempt
there. The new reservation holds the request's whole duration from now: its job starts afresh
on the new site. If no other site fits (or the quota, or capacity that keeps changing, stand in
the way), one unit of work releases the reservation and fails the request with the reason.
Either way the request never holds two reservations, nor none while it is placed.

Only this brain's own sites are tried: a federated brain does not escalate a failover to the
national brain, and a request placed across regions is not placed again (it fails, and its
parts are released through the national brain). Nor is a request with flows: its data was
planned to move to the failed site (it fails, and its flows are released).
"""

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.decision import Decision, SegmentKind
from cnbrain.domain.events import RequestEvent, RequestEventKind
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.states import ENDED_ATTEMPT, RUNNABLE, RequestState
from cnbrain.ledger.claim import Claim, claim_from, reservation_of, window_of
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.regional.job_outcomes import SYSTEM, finish_request, held_parts
from cnbrain.regional.unit_of_work import CapacityChanges
from cnbrain.regional.use_cases.deciding import Decider
from cnbrain.storage import audit, jobs, ledger_store, request_events, requests
from cnbrain.storage.clock import utcnow
from cnbrain.storage.jobs import Job

log = logging.getLogger("cnbrain.regional")


@dataclass(frozen=True, slots=True)
class Failover:
    """Where the request went: `site` (None: it failed) and why."""

    site: str | None
    reason: str


class BackendKind:
    """The kind of scheduler ("slurm", "simulator") of a site, from the map in use (`map()`)."""

    def __init__(self, map: Callable[[], ComputeNetworkMap]) -> None:
        self._map = map

    def __call__(self, site_id: str) -> str:
        cmap = self._map()
        index = cmap.site_index.get(site_id)
        return cmap.sites[index].execution.kind if index is not None else jobs.SIMULATOR_KIND


class PlaceElsewhere:
    """Places requests again (see the module docstring). `decider` decides, as for the
    request use cases; `forget()` drops the brain's cached snapshot; `changes` is the unit of
    work of every change of capacity; `attempts` bounds the decisions of one request;
    `federated`: the brain is one member of a federation (it reserves only paths inside its
    own region); `backend_of` names the kind of scheduler of a site."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        changes: CapacityChanges,
        decider: Decider,
        forget: Callable[[], None],
        attempts: int,
        federated: bool,
        backend_of: BackendKind,
    ) -> None:
        self._sessions = sessions
        self._changes = changes
        self._decider = decider
        self._forget = forget
        self._attempts = attempts
        self._federated = federated
        self._backend_of = backend_of

    async def __call__(self, request: PlacementRequest, *, last: Job) -> Failover:
        """Place `request` again without `last.site_id` and queue attempt `last.attempt + 1`
        there, or fail it. `last` is its attempt that was not submitted. Nothing happens (and
        the site is None, with a reason) when the request moved on meanwhile (another
        instance settled it, or it was cancelled)."""
        why = f"attempt {last.attempt} on site {last.site_id} was not submitted: {last.message}"
        if request.moves_data:
            return await self._fail(
                request,
                last,
                f"{why}; its flows were planned to that site, which only a new submission "
                "plans again",
            )
        async with self._sessions() as session:
            if await held_parts(session, request_id=request.id):
                return await self._fail(
                    request,
                    last,
                    f"{why}; it was placed across regions, which only a new submission does again",
                )
        for _ in range(self._attempts):
            async with self._sessions() as session:
                held = await ledger_store.held_claims(session, request_id=request.id)
            arrays, [decision], [reservation], fresh = await self._decider.decide(
                [request], adjust=_elsewhere(held, last.site_id)
            )
            if reservation is None or not self._local_enough(decision):
                if not fresh:
                    self._forget()
                    continue
                other = decision.reason or "only sites of another region fit"
                return await self._fail(request, last, f"{why}; no other site can take it: {other}")
            window = window_of(start_s=int(time.time()), duration_hours=request.duration_hours)
            claim = claim_from(reservation, arrays=arrays, tenant_id=request.tenant, window=window)
            decision = decision.model_copy(update={"reservation_id": reservation.id})
            outcome = await self._move(request, last, decision, claim, held, why)
            if outcome is not None:
                return outcome
        return await self._fail(
            request, last, f"{why}; capacity kept changing during {self._attempts} attempts"
        )

    def _local_enough(self, decision: Decision) -> bool:
        """A federated brain reserves only paths inside its own region (one local segment)."""
        if not self._federated or decision.path is None:
            return True
        return all(s.kind is SegmentKind.LOCAL for s in decision.path.segments)

    async def _move(
        self,
        request: PlacementRequest,
        last: Job,
        decision: Decision,
        claim: Claim,
        held: Sequence[Claim],
        why: str,
    ) -> Failover | None:
        """One unit of work: the old reservations (`held`) for the new one (`claim`, of
        `decision`), the request on the new site (its `moved` event), its next attempt queued.
        None when capacity changed meanwhile (decide again)."""
        site = str(decision.site)
        reason = f"{why}; placed again on site {site}"
        try:
            async with self._changes.begin() as (session, change):
                if not await _still_stalled(session, request.id, last.attempt):
                    return Failover(site=None, reason="settled meanwhile")
                change.free()  # the cached snapshot cannot follow a move: it is forgotten
                for old in held:
                    await ledger_store.release(session, reservation_id=old.reservation_id)
                await ledger_store.reserve_many(session, claims=[claim])
                await requests.save_decisions(
                    session, {request.id: decision.model_dump(mode="json")}
                )
                await jobs.move_request_to_site(
                    session, request_id=request.id, site_id=site, reason=reason
                )
                await jobs.queue_attempt(
                    session,
                    request_id=request.id,
                    tenant_id=request.tenant,
                    attempt=last.attempt + 1,
                    site_id=site,
                    backend=self._backend_of(site),
                    message=f"placed again after attempt {last.attempt} on site {last.site_id}",
                )
                moved = RequestEvent.of(
                    request.id,
                    RequestEventKind.MOVED,
                    utcnow(),
                    attempt=last.attempt + 1,
                    site=site,
                    previous_site=last.site_id,
                    reason=why,
                )
                await request_events.append_many(session, [moved])
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
            return await self._fail(
                request, last, f"{why}; the tenant's quota of {exceeded.resource} is used up"
            )
        log.info("request %s: placed again on %s after %s", request.id, site, last.site_id)
        return Failover(site=site, reason=reason)

    async def _fail(self, request: PlacementRequest, last: Job, reason: str) -> Failover:
        """Fail the request with `reason` and release what it holds."""
        async with self._changes.begin() as (session, change):
            record = await requests.get_request(
                session, tenant_id=None, request_id=request.id, for_update=True
            )
            attempts = await jobs.attempts_of(session, request_id=request.id)
            if record is None or not attempts or attempts[-1].attempt != last.attempt:
                return Failover(site=None, reason="settled meanwhile")
            if await finish_request(
                session,
                request_id=request.id,
                tenant_id=request.tenant,
                state=RequestState.FAILED,
                reason=reason,
                attempt=last.attempt,
            ):
                change.free()
        return Failover(site=None, reason=reason)


def _elsewhere(held: Sequence[Claim], failed_site: str) -> Callable[[Snapshot], Snapshot]:
    """The view a decision elsewhere is taken on: a snapshot with what `held` takes given
    back and nothing free on `failed_site`."""

    def adjust(snapshot: Snapshot) -> Snapshot:
        return _without_site(_given_back(snapshot, held), failed_site)

    return adjust


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
        nodes=snapshot.nodes,
    )


async def _still_stalled(session: AsyncSession, request_id: str, last: int) -> bool:
    """Lock the request; True while it may run and `last` is its latest attempt, ended."""
    record = await requests.get_request(
        session, tenant_id=None, request_id=request_id, for_update=True
    )
    if record is None or record.state not in RUNNABLE:
        return False
    attempts = await jobs.attempts_of(session, request_id=request_id)
    return bool(attempts) and attempts[-1].attempt == last and attempts[-1].state in ENDED_ATTEMPT
