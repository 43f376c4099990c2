"""A request body as the caller sent it, made a checked request of one tenant.

What a request asks of time is checked here too: the priority class it names must exist; the
class, the max wait and whether it may wait (`start`) are stored with it for the admission
queue.
"""

import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.bounds import has_control_characters
from cnbrain.domain.errors import Conflict, Forbidden, Invalid
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.states import RequestState
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.request_check import check_request, parse_request
from cnbrain.regional.security import Principal
from cnbrain.storage import priority_classes, requests, tenants
from cnbrain.telemetry.tenant import note_tenant


def new_request_id() -> str:
    return f"req-{uuid.uuid4().hex[:16]}"


class Intake:
    """`map()` is the map in use; a tenant may have at most `max_queued` requests waiting in
    the admission queue."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        map: Callable[[], ComputeNetworkMap],
        max_queued: int,
    ) -> None:
        self._sessions = sessions
        self._map = map
        self._max_queued = max_queued
        self._known_tenants: set[str] = set()
        """Tenant ids found in the database so far (tenants are never deleted, so this
        stays true)."""

    async def tenant_of(self, principal: Principal, body: dict[str, Any]) -> str:
        """The tenant a request is for: the caller's own, or the one staff name. Raises
        Forbidden or Invalid."""
        asked = body.get("tenant")
        if principal.is_staff:
            if not isinstance(asked, str) or not asked:
                raise Invalid("staff must name the tenant a request is for", field="tenant")
            if has_control_characters(asked):
                raise Invalid("must not contain control characters", field="tenant")
            if asked not in self._known_tenants:
                async with self._sessions() as session:
                    if await tenants.get_tenant(session, tenant_id=asked) is None:
                        raise Invalid(f"unknown tenant {asked!r}", field="tenant")
                self._known_tenants.add(asked)
            return asked
        assert principal.tenant_id is not None
        if asked is not None and asked != principal.tenant_id:
            raise Forbidden(f"you may submit only for tenant {principal.tenant_id!r}")
        return principal.tenant_id

    async def checked(self, principal: Principal, body: dict[str, Any]) -> PlacementRequest:
        """`body` as a new request (new id) of its tenant, checked against the map and the
        priority classes. Raises Forbidden, Invalid (field `priority_class` for a class that
        does not exist), or Conflict when it asks to wait and its tenant has `max_queued`
        requests waiting already (submissions at the same instant may pass the count
        together, by at most as many as arrive at once). The request's tenant is the call's
        from here on (for the logs and the span), whoever the caller."""
        tenant = await self.tenant_of(principal, body)
        note_tenant(tenant)
        request = parse_request({**body, "id": new_request_id(), "tenant": tenant})
        check_request(request, self._map())
        if request.priority_class is not None:
            await self._check_class(request.priority_class)
        if request.start == "queue":
            await self._check_room_in_queue(tenant)
        return request

    async def _check_room_in_queue(self, tenant: str) -> None:
        async with self._sessions() as session:
            waiting = await requests.count_in_state(
                session, tenant_id=tenant, state=RequestState.QUEUED
            )
        if waiting >= self._max_queued:
            raise Conflict(
                f"tenant {tenant!r} has {waiting} requests waiting in the queue, the most it "
                "may; cancel some, or wait for them to be admitted"
            )

    async def _check_class(self, name: str) -> None:
        """Raise Invalid (field `priority_class`) unless a class called `name` is stored."""
        async with self._sessions() as session:
            classes = await priority_classes.list_classes(session)
        if classes is None:
            raise Invalid(f"unknown class {name!r}: no class is stored", field="priority_class")
        classes.get(name)
