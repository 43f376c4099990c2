"""What a request becomes when it is settled, and the one writer of it."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.domain.events import RequestEvent, RequestEventKind
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.states import RequestState
from cnbrain.ledger.reservation import Reservation
from cnbrain.regional.schemas import RequestView
from cnbrain.storage import audit, jobs, request_events, requests

QUEUED_REASON = "waits in the admission queue"
"""The reason of a request that joins the queue."""

_EVENT_OF_STATE = {
    RequestState.PLACED: RequestEventKind.PLACED,
    RequestState.QUEUED: RequestEventKind.QUEUED,
    RequestState.REJECTED: RequestEventKind.REJECTED,
    RequestState.FAILED: RequestEventKind.FAILED,
}
"""The event of each state an outcome settles a request in."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """A request's settled state (placed, queued, rejected or failed) and the decision behind
    it (None: none was taken), by `actor`; `at` is when it was written, once it is. `kind` is
    the event written (None: the event of the state; `admitted` for a queued request placed)."""

    request: PlacementRequest
    decision: Decision | None
    state: str
    reason: str | None
    actor: str
    at: datetime | None = None
    kind: RequestEventKind | None = None

    @classmethod
    def of(
        cls,
        request: PlacementRequest,
        decision: Decision,
        actor: str,
        reservation: Reservation | None = None,
    ) -> "Outcome":
        """A decision's outcome: placed (holding `reservation`, when this brain takes it), or
        rejected with its reason."""
        if decision.status is DecisionStatus.PLACED:
            if reservation is not None:
                decision = decision.model_copy(update={"reservation_id": reservation.id})
            return cls(request, decision, RequestState.PLACED, None, actor)
        return cls(request, decision, RequestState.REJECTED, decision.reason or "rejected", actor)

    @classmethod
    def queued(cls, request: PlacementRequest, actor: str) -> "Outcome":
        """A request that asks to wait (`start: "queue"`): it joins the admission queue, whose
        round decides it (`use_cases.admit`)."""
        return cls(request, None, RequestState.QUEUED, QUEUED_REASON, actor)

    def refused(self, reason: str) -> "Outcome":
        """This outcome rejected instead, for `reason` (its decision, if any, says so too, and
        holds no reservation)."""
        decision = self.decision
        if decision is not None:
            decision = decision.model_copy(
                update={"status": DecisionStatus.REJECTED, "reason": reason, "reservation_id": None}
            )
        return Outcome(self.request, decision, RequestState.REJECTED, reason, self.actor)

    def event(self, at: datetime) -> RequestEvent:
        """The request's event of this outcome, written at `at`: placed on its site, or
        rejected or failed with the reason."""
        kind = self.kind or _EVENT_OF_STATE[RequestState(self.state)]
        placed = self.state == RequestState.PLACED
        site = self.decision.site if placed and self.decision is not None else None
        return RequestEvent.of(self.request.id, kind, at, site=site, reason=self.reason)

    def as_of(self, created_at: datetime) -> RequestView:
        """The request's view, built from what was written."""
        assert self.at is not None
        placed = self.decision is not None and self.state == RequestState.PLACED
        return RequestView(
            id=self.request.id,
            tenant=self.request.tenant,
            state=RequestState(self.state),
            reason=self.reason,
            site=self.decision.site if placed and self.decision is not None else None,
            created_at=created_at,
            updated_at=self.at,
            request=self.request,
            decision=self.decision,
        )


async def write_outcomes(session: AsyncSession, outcomes: Sequence[Outcome]) -> datetime:
    """Move every request of `outcomes` to its state, store its decision, audit it and append
    its event (and when its job may start, `Decision.starts_at`), with one statement each for
    all of them; returns the time written. Raises like
    `requests.set_states` (the caller rolls back)."""
    at = await requests.set_states(
        session,
        [
            requests.StateChange(
                request_id=o.request.id,
                state=o.state,
                reason=o.reason,
                site_id=o.decision.site
                if o.decision is not None and o.state == RequestState.PLACED
                else None,
            )
            for o in outcomes
        ],
    )
    await requests.save_decisions(
        session,
        {
            o.request.id: requests.JsonText(o.decision.model_dump_json())
            for o in outcomes
            if o.decision is not None
        },
        at=at,
    )
    await jobs.save_starts(
        session,
        {
            o.request.id: o.decision.starts_at
            for o in outcomes
            if o.state == RequestState.PLACED
            and o.decision is not None
            and o.decision.starts_at is not None
        },
    )
    await audit.record_many(
        session,
        [
            audit.Entry(
                actor=o.actor,
                tenant_id=o.request.tenant,
                action=f"request.{o.state}",
                object_type="request",
                object_id=o.request.id,
                detail={"site": o.decision.site}
                if o.decision is not None and o.decision.site
                else {"reason": o.reason},
                at=at,
            )
            for o in outcomes
        ],
    )
    await request_events.append_many(session, [o.event(at) for o in outcomes])
    return at
