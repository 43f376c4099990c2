"""Any brain, any request (`docs/federation.md`): a tenant's call that this brain takes and
another region must answer, and a call another region took that this brain answers.

- `Forwarder` (the brain that took the call): a submission or quote whose source province
  another region owns, a group all of whose members' source provinces one other region
  owns, and a read or cancel of a request this brain does not hold, go to
  the national brain (`Forward`); the caller gets the answering brain's answer as it stands
  (status, body, Retry-After). Whether a body goes elsewhere is decided on the map alone
  (`owner_of`), so a request of this region's own provinces takes no extra call. A query
  (a page of the listing, of usage) is asked of every other region of the map (`ask`);
  `regional.federated_reads` makes the federation's answer of their parts.
- `ServeForwarded` (the brain that answers): the caller is checked again on this brain's
  copy of the federation's tenancy, then the call runs the same use case as a call made
  here, and its outcome, or its error as a problem document, is the answer.
"""

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import Response
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.errors import CnbrainError, Forbidden, Invalid, NotFound
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.forward_queries import (
    QUERIES,
    ListQuery,
    Query,
    ReportQuery,
    UsageQuery,
    operation_of,
    query_of,
    text_of,
)
from cnbrain.federation.forward_wire import (
    CANCEL,
    EVENTS,
    GET,
    ID,
    MAX_ANSWER,
    MAX_BODY,
    QUOTE,
    SUBMIT,
    SUBMIT_GROUP,
    WITH_BODY,
    check_call,
    check_group_region,
    provinces_of,
)
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.regional.federated_pages import request_cursor_of
from cnbrain.regional.problems import ApiError, answer_of
from cnbrain.regional.schemas import RequestGroupBody, RequestPage
from cnbrain.regional.security import Principal, Role
from cnbrain.regional.use_cases import RequestUseCases
from cnbrain.regional.use_cases.usage_reports import UsageReports
from cnbrain.storage import tenants
from cnbrain.telemetry.tenant import note_tenant
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
    """`region` is this brain's region, `own` its provinces, `map()` the map in use, `link`
    the national link."""

    region: str
    own: frozenset[str]
    map: Callable[[], ComputeNetworkMap]
    link: ForwardingLink

    def others(self) -> list[str]:
        """The other regions that hold requests: those owning a province on the map, in
        order of their ids."""
        owners = {province.region for province in self.map().provinces.values()}
        return sorted(owners - {self.region})

    async def ask(
        self, principal: Principal, query_for: Callable[[str], Query]
    ) -> list[tuple[str, common_pb2.ForwardedAnswer | PeerUnavailable]]:
        """Each other region's answer to its query, `query_for(region)` (`others`, in that
        order), asked at once: its answer as it stands, or PeerUnavailable when it (or the
        national brain) could not be asked. A region the national brain says never
        registered holds nothing of the federation's: it has no answer here."""
        regions = self.others()
        queries = [query_for(region) for region in regions]
        answers = await asyncio.gather(
            *(
                self._forward(
                    principal, operation_of(query), body_json=text_of(query), region_id=region
                )
                for region, query in zip(regions, queries, strict=True)
            ),
            return_exceptions=True,
        )
        out: list[tuple[str, common_pb2.ForwardedAnswer | PeerUnavailable]] = []
        for region, answer in zip(regions, answers, strict=True):
            if isinstance(answer, PeerUnavailable):
                out.append((region, answer))
            elif isinstance(answer, NotFound):
                continue
            elif isinstance(answer, BaseException):
                raise answer
            elif answer.region_id != region:
                out.append(
                    (
                        region,
                        PeerUnavailable(
                            f"region {region!r}",
                            "invalid_answer",
                            f"answered as {answer.region_id!r}",
                        ),
                    )
                )
            else:
                out.append((region, answer))
        return out

    def owner_of(self, body: dict[str, Any]) -> str | None:
        """The region that owns the source province `body` names, when that is another
        region's; None for a province of this region, one the map has not, or none (the
        body is then checked here, as any other)."""
        province = body.get("source_province")
        if not isinstance(province, str) or province in self.own:
            return None
        known = self.map().provinces.get(province)
        return None if known is None else known.region

    def group_owner(self, group: RequestGroupBody) -> str | None:
        """The other region that owns the source province of every member of `group`; None
        when this region owns them all, or a member names no province of the map (the group
        is then checked here, as any other). Raises Invalid naming the first member whose
        province another region owns than the first member's: one region places a group,
        and only within its own provinces."""
        regions: list[str] = []
        for i, member in enumerate(group.requests):
            province = member.get("source_province")
            known = self.map().provinces.get(province) if isinstance(province, str) else None
            if known is None:
                return None
            if regions:
                check_group_region(
                    regions[0], f"requests.{i}.source_province", known.code, known.region
                )
            regions.append(known.region)
        return None if regions[0] == self.region else regions[0]

    async def submit_group(self, principal: Principal, group: RequestGroupBody) -> Response:
        """Forward a group's submission; the owner's answer."""
        body = _body(group.model_dump(mode="json"))
        return response_of(await self._forward(principal, SUBMIT_GROUP, body_json=body))

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

    async def cancel(self, principal: Principal, request_id: str) -> Response:
        """Forward a cancel of a request this brain does not hold; the answer of the region
        that holds it (its cancelled view, or its refusal: 409 for one that has ended), or
        404 when none does."""
        return response_of(await self._forward(principal, CANCEL, request_id=request_id))

    async def _forward(
        self,
        principal: Principal,
        operation: "common_pb2.ForwardedOperation.ValueType",
        *,
        body_json: str = "",
        idempotency_key: str = "",
        request_id: str = "",
        region_id: str = "",
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
            region_id=region_id,
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


def _group_of(body: dict[str, Any]) -> RequestGroupBody:
    """The group in a forwarded body, checked as the REST API checks it; Invalid naming the
    first field that is wrong."""
    try:
        return RequestGroupBody.model_validate(body)
    except ValidationError as wrong:
        first = wrong.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "body_json"
        raise Invalid(first["msg"], field=field) from None


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
        self._usage = UsageReports(sessions)

    async def __call__(
        self, call: common_pb2.ForwardedCall, *, from_region: str
    ) -> common_pb2.ForwardedAnswer:
        """This brain's answer to `call`, as its REST API would give it (a query: this
        region's part of the federation's answer). Raises Invalid for a call out of bounds,
        a submission or quote of a province of another region, or a query of another."""
        body = check_call(call)
        if not ID.fullmatch(from_region):
            raise Invalid("must be a region's id", field="from_region")
        if call.operation in QUERIES and call.region_id != self._region_id:
            raise Invalid(f"this is region {self._region_id!r}", field="region_id")
        if call.operation in WITH_BODY:
            assert body is not None
            for field, province in provinces_of(call.operation, body):
                if province not in self._own():
                    raise Invalid(
                        f"province {province!r} is not in region {self._region_id!r}", field=field
                    )
        try:
            principal = await self._principal(call.caller, from_region)
            note_tenant(principal.tenant_id)  # for the call's logs and span
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
        if call.operation == SUBMIT_GROUP:
            assert body is not None
            group = await cases.submit_group(principal, _group_of(body))
            return 201, group.model_dump_json()
        if call.operation == QUOTE:
            assert body is not None
            return 200, (await cases.quote(principal, body)).model_dump_json()
        if call.operation == GET:
            return 200, (await cases.read.one(principal, call.request_id)).model_dump_json()
        if call.operation == EVENTS:
            return 200, (await cases.events(principal, call.request_id)).model_dump_json()
        if call.operation == CANCEL:
            return 200, (await cases.cancel(principal, call.request_id)).model_dump_json()
        assert call.operation in QUERIES
        return 200, await self._query(principal, query_of(call.operation, call.body_json))

    async def _query(self, principal: Principal, query: Query) -> str:
        """This region's part of a federated listing or usage read, as JSON (field names,
        not aliases)."""
        if isinstance(query, ListQuery):
            page = await self._cases.read.page(
                principal, state=query.state, limit=query.limit, cursor=query.cursor
            )
            return fitted(page)
        if isinstance(query, UsageQuery):
            records = await self._usage.records(
                principal,
                start=query.start,
                end=query.end,
                tenant=query.tenant,
                limit=query.limit,
                cursor=query.cursor,
            )
            return records.model_dump_json()
        assert isinstance(query, ReportQuery)
        report = await self._usage.report(
            principal, start=query.start, end=query.end, tenant=query.tenant
        )
        return report.model_dump_json()

    def _problem(self, response: Response) -> common_pb2.ForwardedAnswer:
        retry = response.headers.get("Retry-After")
        return common_pb2.ForwardedAnswer(
            status=response.status_code,
            body_json=bytes(response.body).decode(),
            content_type="application/problem+json",
            retry_after_s=int(retry) if retry and retry.isdigit() else 0,
            region_id=self._region_id,
        )


def fitted(page: RequestPage, *, most: int = MAX_ANSWER - 1024) -> str:
    """`page` as JSON of at most `most` characters: when it is larger, its last requests
    are left to the next page (its cursor then follows the last one kept). A page keeps at
    least its first request."""
    text = page.model_dump_json()
    if len(text) <= most or len(page.items) <= 1:
        return text
    sizes = [len(view.model_dump_json()) + 1 for view in page.items]
    kept, room = 0, most - 200
    while kept < len(sizes) and room - sizes[kept] >= 0:
        room -= sizes[kept]
        kept += 1
    last = page.items[max(kept, 1) - 1]
    return RequestPage(
        items=page.items[: max(kept, 1)],
        next_cursor=request_cursor_of(last.created_at, last.id),
    ).model_dump_json()
