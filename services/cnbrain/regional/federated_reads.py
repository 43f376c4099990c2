"""The listing and usage of the whole federation, read on any regional brain (`docs/
federation.md`, "Any brain, any request").

This brain reads its own part, asks every other region of the map for its part through the
national brain (`Forwarder.ask`), and merges them (`federated_pages`). The answer is whole
or it is not given:

- a region that refuses the caller's call (say 403: it does not know the caller yet, or 404:
  no such tenant there) makes that refusal the answer, as it stands;
- a region that cannot be asked (it, or the national brain, does not answer), or answers out
  of bounds, makes the answer 503 naming every such region, with `Retry-After`: a page that
  left a region out would move the cursor past that region's requests for good, and a usage
  sum without it would be wrong.

A caller that is not in the federation's tenancy (each brain's own first admin) is known to
no other brain, which would refuse it: its view is this brain's own, answered as a
standalone brain answers it.
"""

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any, TypeVar

from fastapi import Response
from pydantic import BaseModel, ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.federation.errors import PeerUnavailable
from cnbrain.federation.forward_queries import ListQuery, Query, ReportQuery, UsageQuery
from cnbrain.regional.federated_pages import (
    WrongPageError,
    merge_reports,
    merge_requests,
    merge_usage,
    request_cursor,
    usage_cursor,
)
from cnbrain.regional.forwarding import Forwarder, response_of
from cnbrain.regional.schemas import RequestPage, UsagePage, UsageReport
from cnbrain.regional.security import Principal
from cnbrain.regional.use_cases.read import ReadRequests
from cnbrain.regional.use_cases.usage_reports import UsageReports, period
from cnbrain.storage import tenancy_log
from cnbrain.v1 import common_pb2

_Page = TypeVar("_Page", bound=BaseModel)
_Own = TypeVar("_Own")
Answer = common_pb2.ForwardedAnswer | PeerUnavailable
"""A region's answer to a query, or why it could not be asked."""


class FederatedReads:
    """The federation's reads, for a brain that forwards with `forwarder`, whose own part
    `read` and `usage` read."""

    def __init__(
        self,
        forwarder: Forwarder,
        read: ReadRequests,
        usage: UsageReports,
        sessions: async_sessionmaker[AsyncSession],
    ) -> None:
        self._forwarder = forwarder
        self._read = read
        self._usage = usage
        self._sessions = sessions

    async def _alone(self, principal: Principal) -> bool:
        """Whether the caller is known to this brain only (not in the federation's
        tenancy)."""
        async with self._sessions() as session:
            return not await tenancy_log.made_through_federation(session, principal.user_id)

    async def requests(
        self, principal: Principal, *, state: str | None, limit: int, cursor: str | None
    ) -> RequestPage | Response:
        """The federation's requests in the caller's scope, newest first, from `cursor` on
        (a cursor of this listing, on any brain). Raises Invalid (field `cursor`) for one
        that is not, PeerUnavailable naming the regions that could not be asked."""
        if await self._alone(principal):
            return await self._read.page(principal, state=state, limit=limit, cursor=cursor)
        after = request_cursor(cursor) if cursor is not None else None
        query = ListQuery(state=state, limit=limit, cursor=cursor)
        own, answers = await self._both(
            self._read.page(principal, state=state, limit=limit, cursor=cursor),
            principal,
            lambda _region: query,
        )
        parts = _parts(answers, RequestPage)
        if isinstance(parts, Response):
            return parts
        return _merged(
            lambda: merge_requests(
                [(self._forwarder.region, own), *parts],
                limit=limit,
                after=after,
                state=state,
                tenant=principal.tenant_scope(),
            )
        )

    async def usage(
        self,
        principal: Principal,
        *,
        start: datetime | None,
        end: datetime | None,
        tenant: str | None,
        limit: int,
        cursor: str | None,
    ) -> UsagePage | Response:
        """The federation's usage records of the period (`usage_reports.period`), oldest end
        first, from `cursor` on, with the period's totals summed over the regions. Raises
        as `UsageReports.records`, Invalid (field `cursor`) for a cursor not of this
        listing, PeerUnavailable naming the regions that could not be asked."""
        if await self._alone(principal):
            return await self._usage.records(
                principal, start=start, end=end, tenant=tenant, limit=limit, cursor=cursor
            )
        begin, finish = period(start, end)
        after = usage_cursor(cursor) if cursor is not None else None

        def local(region: str) -> str | None:
            return None if after is None else after.local_for(region)

        own, answers = await self._both(
            self._usage.records(
                principal,
                start=begin,
                end=finish,
                tenant=tenant,
                limit=limit,
                cursor=local(self._forwarder.region),
            ),
            principal,
            lambda region: UsageQuery(
                start=begin, end=finish, tenant=tenant, limit=limit, cursor=local(region)
            ),
        )
        parts = _parts(answers, UsagePage)
        if isinstance(parts, Response):
            return parts
        return _merged(
            lambda: merge_usage(
                [(self._forwarder.region, own), *parts],
                limit=limit,
                after=after,
                tenant=own.tenant,
                start=begin,
                end=finish,
            )
        )

    async def report(
        self,
        principal: Principal,
        *,
        start: datetime | None,
        end: datetime | None,
        tenant: str | None,
    ) -> UsageReport | Response:
        """The federation's usage report of the period, every region's rows and each
        tenant's totals summed over the regions. Raises as `UsageReports.report`, and
        PeerUnavailable naming the regions that could not be asked."""
        if await self._alone(principal):
            return await self._usage.report(principal, start=start, end=end, tenant=tenant)
        begin, finish = period(start, end)
        query = ReportQuery(start=begin, end=finish, tenant=tenant)
        own, answers = await self._both(
            self._usage.report(principal, start=begin, end=finish, tenant=tenant),
            principal,
            lambda _region: query,
        )
        parts = _parts(answers, UsageReport)
        if isinstance(parts, Response):
            return parts
        scope = principal.tenant_scope() if not principal.is_staff else tenant
        return _merged(
            lambda: merge_reports(
                [(self._forwarder.region, own), *parts], tenant=scope, start=begin, end=finish
            )
        )

    async def _both(
        self,
        own: Coroutine[Any, Any, _Own],
        principal: Principal,
        query_for: Callable[[str], Query],
    ) -> tuple[_Own, list[tuple[str, Answer]]]:
        """This brain's part (`own`) and every other region's answer, asked meanwhile."""
        theirs = asyncio.create_task(self._forwarder.ask(principal, query_for))
        try:
            mine = await own
        except BaseException:
            theirs.cancel()
            raise
        return mine, await theirs


def _parts(
    answers: Sequence[tuple[str, Answer]], model: type[_Page]
) -> list[tuple[str, _Page]] | Response:
    """Each region's part parsed as `model`; the first refusal as it stands. Raises
    PeerUnavailable naming every region that could not be asked or answered out of bounds."""
    parts: list[tuple[str, _Page]] = []
    failed: list[tuple[str, str]] = []
    for region, answer in answers:
        if isinstance(answer, PeerUnavailable):
            failed.append((region, str(answer)))
            continue
        if answer.status != 200:
            return response_of(answer)
        try:
            parts.append((region, model.model_validate_json(answer.body_json)))
        except ValidationError as wrong:
            failed.append((region, f"an answer out of bounds: {wrong.error_count()} errors"))
    if failed:
        raise _unavailable(failed)
    return parts


def _merged(merge: Callable[[], _Page]) -> _Page:
    try:
        return merge()
    except WrongPageError as wrong:
        raise _unavailable([(wrong.region, f"an answer out of bounds: {wrong.reason}")]) from None


def _unavailable(failed: Sequence[tuple[str, str]]) -> PeerUnavailable:
    names = ", ".join(repr(region) for region, _ in failed)
    return PeerUnavailable(
        f"regions {names}" if len(failed) > 1 else f"region {failed[0][0]!r}",
        "unavailable",
        "the answer is the whole federation's, and these regions' parts are missing: "
        + "; ".join(why for _, why in failed),
    )
