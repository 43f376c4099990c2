"""A request's events, oldest first, as its tenant sees them."""

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.errors import NotFound
from cnbrain.regional.schemas import RequestEventList, RequestEventView
from cnbrain.regional.security import Principal
from cnbrain.storage import request_events


class ListEvents:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def __call__(self, principal: Principal, request_id: str) -> RequestEventList:
        """Every event of the caller's request (staff: any tenant's), oldest first; NotFound
        when the caller has no such request."""
        async with self._sessions() as session:
            events = await request_events.events_of(
                session, request_id=request_id, tenant_id=principal.tenant_scope()
            )
        if events is None:
            raise NotFound(f"request {request_id!r} does not exist")
        return RequestEventList(
            request=request_id,
            events=[RequestEventView(kind=e.kind, at=e.at, detail=dict(e.detail)) for e in events],
        )
