"""Reading requests back: one, or a page of them."""

from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.decision import Decision
from cnbrain.domain.errors import Invalid, NotFound
from cnbrain.domain.states import RequestState
from cnbrain.ledger.claim import FlowHold
from cnbrain.regional.schemas import (
    FlowView,
    QueueBlocker,
    QueueEntry,
    QueuePage,
    QueueView,
    RequestPage,
    RequestView,
)
from cnbrain.regional.security import Principal
from cnbrain.regional.stored_requests import stored_request
from cnbrain.storage import ledger_store, queue_plans, requests
from cnbrain.storage.clock import moment_of
from cnbrain.storage.requests import StoredRequest


class ReadRequests:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def one(self, principal: Principal, request_id: str) -> RequestView:
        """The request, if it is within the caller's scope; else NotFound."""
        async with self._sessions() as session:
            found = await requests.get_request_and_decision(
                session, tenant_id=principal.tenant_scope(), request_id=request_id
            )
            if found is None:
                raise NotFound(f"request {request_id!r} does not exist")
            plans = (
                await queue_plans.plans_of(session, [request_id])
                if found[0].state == RequestState.QUEUED
                else {}
            )
            held = (
                await ledger_store.held_flows(session, request_id=request_id)
                if found[0].body.get("flows")
                else []
            )
        view = view_of(*found, plan=plans.get(request_id))
        view.flows = [_flow_view(flow) for flow in held]
        return view

    async def queue(self, principal: Principal, *, after: int, limit: int) -> QueuePage:
        """The queued requests in the caller's scope in admission order, from position
        `after` on (exclusive), as the last admission round planned them."""
        async with self._sessions() as session:
            rows = await queue_plans.in_order(
                session, tenant_id=principal.tenant_scope(), after=after, limit=limit + 1
            )
        page = rows[:limit]
        items = [
            QueueEntry(
                id=row.plan.request_id,
                tenant=row.tenant_id,
                priority_class=row.priority_class,
                submitted_at=row.submitted_at,
                queued_at=row.queued_at,
                position=row.plan.position,
                estimated_start=row.plan.estimated_start,
                site=_text(row.plan.detail.get("site")),
                reason=str(row.plan.detail.get("reason", "")),
                planned_at=row.plan.planned_at,
            )
            for row in page
        ]
        more = len(rows) > limit and bool(page)
        return QueuePage(items=items, next_after=page[-1].plan.position if more else None)

    async def page(
        self, principal: Principal, *, state: str | None, limit: int, cursor: str | None
    ) -> RequestPage:
        """The caller's requests from `cursor` on; Invalid for a cursor not issued here."""
        async with self._sessions() as session:
            try:
                items, next_cursor = await requests.list_requests(
                    session,
                    tenant_id=principal.tenant_scope(),
                    state=state,
                    limit=limit,
                    cursor=cursor,
                )
            except requests.BadCursor:
                raise Invalid("not a cursor this brain issued", field="cursor") from None
            decisions = await requests.get_decisions(session, request_ids=[r.id for r in items])
            plans = await queue_plans.plans_of(
                session, [r.id for r in items if r.state == RequestState.QUEUED]
            )
        return RequestPage(
            items=[view_of(r, decisions.get(r.id), plan=plans.get(r.id)) for r in items],
            next_cursor=next_cursor,
        )


def view_of(
    record: StoredRequest,
    decision: dict[str, Any] | None,
    *,
    plan: queue_plans.QueuePlan | None = None,
) -> RequestView:
    """The view of a stored request, with its place in the queue (`plan`) while it is
    queued. One stored by an earlier version that no longer validates is shown without its
    request (and without a decision that no longer validates); left pending, it is shown
    failed, as the next start leaves it."""
    request, problem = stored_request(record.body)
    state, reason = record.state, record.reason
    if request is None and state == RequestState.PENDING:
        state, reason = (
            RequestState.FAILED,
            f"its stored form is no longer a valid request: {problem}",
        )
    try:
        document = Decision.model_validate(decision) if decision is not None else None
    except ValidationError:
        document = None
    return RequestView(
        id=record.id,
        tenant=record.tenant_id,
        state=RequestState(state),
        reason=reason,
        site=record.site_id,
        created_at=record.created_at,
        updated_at=record.updated_at,
        request=request,
        decision=document,
        queue=_queue_view(plan) if plan is not None and state == RequestState.QUEUED else None,
    )


def _flow_view(flow: FlowHold) -> FlowView:
    return FlowView(
        kind=flow.kind,
        peer=flow.peer,
        mbps=flow.mbps,
        start=moment_of(flow.window.start),
        end=moment_of(flow.window.end),
        links=list(flow.link_ids),
    )


def _queue_view(plan: queue_plans.QueuePlan) -> QueueView:
    detail = plan.detail
    blockers = []
    for one in detail.get("blockers", ()):
        try:
            blockers.append(QueueBlocker.model_validate(one))
        except ValidationError:
            continue
    return QueueView(
        position=plan.position,
        estimated_start=plan.estimated_start,
        site=_text(detail.get("site")),
        planned_at=plan.planned_at,
        reason=str(detail.get("reason", "")),
        blockers=blockers,
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
