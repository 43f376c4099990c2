"""New requests as the brain stores them: pending, each with its audit entry and its
`submitted` event."""

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.events import RequestEvent, RequestEventKind
from cnbrain.domain.request import PlacementRequest
from cnbrain.storage import audit, request_events, requests


@dataclass(frozen=True, slots=True)
class Submission:
    """A checked request on its way to be stored; `body` is its JSON as stored."""

    request: PlacementRequest
    user_id: str
    idempotency_key: str | None
    body: requests.JsonText


async def insert_submissions(
    session: AsyncSession, submissions: Sequence[Submission]
) -> tuple[list[requests.NewRequest], list[str | None]]:
    """Store `submissions` as pending, with the audit entries and `submitted` events of those
    stored, in the caller's transaction (one statement each). Returns the requests as stored
    and, aligned with them, None or the earlier request that holds the idempotency key (that
    one is not stored).
    Raises RequestStoreError when any of them cannot be stored: the caller rolls back."""
    new = [
        requests.NewRequest(
            request_id=s.request.id,
            tenant_id=s.request.tenant,
            user_id=s.user_id,
            body=s.body,
            idempotency_key=s.idempotency_key,
        )
        for s in submissions
    ]
    earlier = await requests.insert_requests(session, new)
    stored = [n for n, e in zip(new, earlier, strict=True) if e is None]
    await audit.record_many(
        session,
        [
            audit.Entry(
                actor=n.user_id,
                tenant_id=n.tenant_id,
                action="request.submitted",
                object_type="request",
                object_id=n.request_id,
                at=n.created_at,
            )
            for n in stored
        ],
    )
    await request_events.append_many(
        session,
        [
            RequestEvent.of(n.request_id, RequestEventKind.SUBMITTED, n.created_at, by=n.user_id)
            for n in stored
        ],
    )
    return new, earlier
