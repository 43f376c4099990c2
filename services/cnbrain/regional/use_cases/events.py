"""A request's events, oldest first, as its tenant sees them."""

from collections.abc import Mapping
from typing import Any

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
        when the caller has no such request. Who acted (`by`, a user id) is shown to staff,
        and to a tenant's user only where it acted itself: a tenant does not learn the ids of
        other users, staff among them."""
        async with self._sessions() as session:
            events = await request_events.events_of(
                session, request_id=request_id, tenant_id=principal.tenant_scope()
            )
        if events is None:
            raise NotFound(f"request {request_id!r} does not exist")
        return RequestEventList(
            request=request_id,
            events=[
                RequestEventView(kind=e.kind, at=e.at, detail=_visible(principal, e.detail))
                for e in events
            ],
        )


def _visible(principal: Principal, detail: Mapping[str, Any]) -> dict[str, Any]:
    shown = dict(detail)
    if not principal.is_staff and shown.get("by") != principal.user_id:
        shown.pop("by", None)
    return shown
