"""Reading back the requests a brain stored: rows written by an earlier version may hold
numbers outside today's bounds, and must not stop whoever reads them."""

import logging
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.events import RequestEvent, RequestEventKind
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.states import RequestState
from cnbrain.storage import audit, request_events, requests
from cnbrain.storage.requests import StoredRequest

log = logging.getLogger("cnbrain.regional")


def stored_request(body: Any) -> tuple[PlacementRequest | None, str]:
    """The request a stored body holds, or None and why it is not a valid request (rows
    stored by an earlier version may hold numbers outside today's bounds)."""
    try:
        return PlacementRequest.model_validate(body), ""
    except ValidationError as exc:
        return None, _first_problem(exc)


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    field = ".".join(str(p) for p in error["loc"]) or "(request)"
    return f"{field}: {error['msg']}"


async def fail_unreadable(
    sessions: async_sessionmaker[AsyncSession], record: StoredRequest, problem: str
) -> None:
    """End a pending or queued request whose stored form is not a valid request: failed,
    with the reason, in one transaction with its audit entry and event (unless it was
    settled meanwhile)."""
    log.error("request %s cannot be read back (%s); it fails", record.id, problem)
    reason = f"its stored form is no longer a valid request: {problem}"
    try:
        async with sessions.begin() as session:
            at = await requests.set_states(
                session, [requests.StateChange(record.id, RequestState.FAILED, reason=reason)]
            )
            await request_events.append_many(
                session,
                [RequestEvent.of(record.id, RequestEventKind.FAILED, at, reason=reason)],
            )
            await audit.record(
                session,
                actor="system",
                tenant_id=record.tenant_id,
                action="request.failed",
                object_type="request",
                object_id=record.id,
                detail={"reason": reason},
            )
    except requests.InvalidTransition:
        log.info("request %s was settled elsewhere meanwhile", record.id)
