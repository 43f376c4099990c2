"""Any brain, any request (`docs/federation.md`): a tenant's call that this brain takes and
another region must answer, and a call another region took that this brain answers.

- `Forwarder` (the brain that took the call): a submission or quote whose source province
  another region owns, and a read of a request this brain does not hold, go to the national
  brain (`Forward`); the caller gets the answering brain's answer as it stands (status,
  body, Retry-After). Whether a body goes elsewhere is decided on the map alone
  (`owner_of`), so a request of this region's own provinces takes no extra call.
- `ServeForwarded` (the brain that answers): the caller is checked again on this brain's
  copy of the federation's tenancy, then the call runs the same use case as a call made
  here, and its outcome, or its error as a problem document, is the answer.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import Response
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.errors import CnbrainError, Forbidden, Invalid
from cnbrain.federation.forward_wire import (
    EVENTS,
    GET,
    ID,
    MAX_BODY,
    QUOTE,
    SUBMIT,
    WITH_BODY,
    check_call,
    province_of,
)
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.regional.problems import ApiError, answer_of
from cnbrain.regional.security import Principal, Role
from cnbrain.regional.use_cases import RequestUseCases
from cnbrain.storage import tenants
from cnbrain.v1 import common_pb2

JSON = "application/json"


class ForwardingLink(Protocol):
    """What the forwarder needs of the national link (`federation.NationalLink.forward`)."""

    async def forward(self, call: common_pb2.ForwardedCall) -> common_pb2.ForwardedAnswer:
        """The answer of the region the national brain handed `call` to. Raises Invalid or
        NotFound with the national brain's words when it refused the call, PeerUnavailable
        when it, or the region that must answer, cannot be reached."""


def response_of(answer: common_pb2.ForwardedAnswer) -> Response:
    """The REST answer of a forwarded call: the answering brain's status, body and
    Retry-After."""
    headers: dict[str, str] = {}
    if answer.retry_after_s:
        headers["Retry-After"] = str(answer.retry_after_s)
    return Response(
        answer.body_json, status_code=answer.status, media_type=answer.content_type, headers=headers
    )


@dataclass(frozen=True, slots=True, eq=False)
class Forwarder:
    """`own` are this region's provinces, `map()` the map in use, `link` the national link."""

    own: frozenset[str]
    map: Callable[[], ComputeNetworkMap]
    link: ForwardingLink

    def owner_of(self, body: dict[str, Any]) -> str | None:
        """The region that owns the source province `body` names, when that is another
        region's; None for a province of this region, one the map has not, or none (the
        body is then checked here, as any other)."""
        province = body.get("source_province")
        if not isinstance(province, str) or province in self.own:
            return None
        known = self.map().provinces.get(province)
        return None if known is None else known.region

    async def submit(
        self, principal: Principal, body: dict[str, Any], *, idempotency_key: str | None
    ) -> Response:
        """Forward a submission; the owner's answer, with its Location on success."""
        answer = await self._forward(
            principal, SUBMIT, body_json=_body(body), idempotency_key=idempotency_key or ""
        )
        response = response_of(answer)
        if answer.status in (200, 201):
            request_id = _id_in(answer.body_json)
            if request_id is not None:
                response.headers["Location"] = f"/v1/requests/{request_id}"
        return response

    async def quote(self, principal: Principal, body: dict[str, Any]) -> Response:
        """Forward a quote; the owner's answer."""
        return response_of(await self._forward(principal, QUOTE, body_json=_body(body)))

    def may_read(self, request_id: str) -> bool:
        """Whether a read of `request_id` may be forwarded (an id the federation writes)."""
        return ID.fullmatch(request_id) is not None

    async def read(self, principal: Principal, request_id: str, *, events: bool) -> Response:
        """Forward a read of a request this brain does not hold; the answer of the region
        that holds it, or 404 when none does."""
        return response_of(
            await self._forward(principal, EVENTS if events else GET, request_id=request_id)
        )

    async def _forward(
        self,
        principal: Principal,
        operation: "common_pb2.ForwardedOperation.ValueType",
        *,
        body_json: str = "",
        idempotency_key: str = "",
        request_id: str = "",
    ) -> common_pb2.ForwardedAnswer:
        call = common_pb2.ForwardedCall(
            operation=operation,
            caller=common_pb2.Caller(
                user_id=principal.user_id,
                role=str(principal.role),
                tenant_id=principal.tenant_id or "",
            ),
            body_json=body_json,
            idempotency_key=idempotency_key,
            request_id=request_id,
        )
        return await self.link.forward(call)


def _id_in(text: str) -> str | None:
    """The request id of the view in `text`, if it is one the federation writes."""
    try:
        view = json.loads(text)
    except ValueError:
        return None
    request_id = view.get("id") if isinstance(view, dict) else None
    return request_id if isinstance(request_id, str) and ID.fullmatch(request_id) else None


def _body(body: dict[str, Any]) -> str:
    text = json.dumps(body, separators=(",", ":"))
    if len(text) > MAX_BODY:
        raise ApiError(
            413,
            "Content Too Large",
            f"a request of another region's province is forwarded, at most {MAX_BODY} "
            "characters of JSON",
        )
    return text


class ServeForwarded:
    """Answers calls other regions took, for region `region_id` owning `own()` provinces."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        cases: RequestUseCases,
        region_id: str,
        own: Callable[[], frozenset[str]],
    ) -> None:
        self._sessions = sessions
        self._cases = cases
        self._region_id = region_id
        self._own = own

    async def __call__(
        self, call: common_pb2.ForwardedCall, *, from_region: str
    ) -> common_pb2.ForwardedAnswer:
        """This brain's answer to `call`, as its REST API would give it. Raises Invalid for
        a call out of bounds, or a submission or quote of a province of another region."""
        body = check_call(call)
        if not ID.fullmatch(from_region):
            raise Invalid("must be a region's id", field="from_region")
        if call.operation in WITH_BODY:
            assert body is not None
            province = province_of(body)
            if province not in self._own():
                raise Invalid(
                    f"province {province!r} is not in region {self._region_id!r}",
                    field="source_province",
                )
        try:
            principal = await self._principal(call.caller, from_region)
            status, text = await self._run(principal, call, body)
        except CnbrainError as exc:
            return self._problem(answer_of(exc))
        return common_pb2.ForwardedAnswer(
            status=status, body_json=text, content_type=JSON, region_id=self._region_id
        )

    async def _principal(self, caller: common_pb2.Caller, from_region: str) -> Principal:
        """The caller as this brain knows it: an active user of the federation with the role
        and tenant the other region saw, of a tenant this brain has. Raises Forbidden."""
        async with self._sessions() as session:
            user = await tenants.get_user(session, user_id=caller.user_id)
            tenant = (
                await tenants.get_tenant(session, tenant_id=caller.tenant_id)
                if caller.tenant_id
                else None
            )
        where = f"region {self._region_id!r}"
        if user is None:
            raise Forbidden(
                f"user {caller.user_id!r} of region {from_region!r} is not known in {where}: "
                "a request of another region's province needs a key made through the federation"
            )
        if user.disabled_at is not None:
            raise Forbidden(f"user {caller.user_id!r} is disabled")
        if user.role != caller.role or (user.tenant_id or "") != caller.tenant_id:
            raise Forbidden(
                f"user {caller.user_id!r} has another role or tenant in {where}; "
                "try again once the federation's tenancy reached it"
            )
        if caller.tenant_id and tenant is None:
            raise Forbidden(f"tenant {caller.tenant_id!r} is not known in {where}")
        return Principal(user_id=user.id, role=Role(user.role), tenant_id=user.tenant_id)

    async def _run(
        self, principal: Principal, call: common_pb2.ForwardedCall, body: dict[str, Any] | None
    ) -> tuple[int, str]:
        cases = self._cases
        if call.operation == SUBMIT:
            assert body is not None
            view, created = await cases.submit(
                principal, body, idempotency_key=call.idempotency_key or None
            )
            return (201 if created else 200), view.model_dump_json()
        if call.operation == QUOTE:
            assert body is not None
            return 200, (await cases.quote(principal, body)).model_dump_json()
        if call.operation == GET:
            return 200, (await cases.read.one(principal, call.request_id)).model_dump_json()
        return 200, (await cases.events(principal, call.request_id)).model_dump_json()

    def _problem(self, response: Response) -> common_pb2.ForwardedAnswer:
        retry = response.headers.get("Retry-After")
        return common_pb2.ForwardedAnswer(
            status=response.status_code,
            body_json=bytes(response.body).decode(),
            content_type="application/problem+json",
            retry_after_s=int(retry) if retry and retry.isdigit() else 0,
            region_id=self._region_id,
        )
