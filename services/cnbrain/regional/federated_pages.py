"""The federation's listing and usage made of every region's part (`docs/federation.md`,
"Any brain, any request"): pure functions, no I/O.

**The listing** (`GET /v1/requests`) is ordered newest first by (created_at, id) on every
brain, and a request's id is unique in the federation, so one position in that order is a
position in every region's listing: the federation's cursor is the (created_at, id) of the
last request of the page, in the very form a brain's own listing issues (`request_cursor`),
and each region is asked for its page after it. **The usage records** (`GET /v1/usage`) are
ordered oldest end first by (ended_at, id), and a record's id is only unique in its region,
so the federation orders them by (ended_at, region, id) and its cursor carries the three
(`usage_cursor`); each region's own cursor is derived from it (`UsageCursor.local_for`).

A merge (`merge_requests`, `merge_usage`) takes each region's page of at most `limit`
items after the cursor. A region that has more than it gave bounds the merged page: its
next items may come right after its last one, so nothing past that last one is taken. The
page is the first `limit` items within every bound, in order; its cursor is its last item's
position, null when no region has more and every item was taken. So every item is listed
once over the pages, whatever the number of regions, or the size of their pages.

A region's page is peer input: it is checked (`WrongPageError` names the region and what is
wrong) to be in order, after the cursor, of the asked filter and tenant, at most `limit`
items, and not empty while it says it has more.
"""

import base64
import binascii
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Generic, TypeVar

from cnbrain.domain.bounds import has_control_characters
from cnbrain.domain.errors import Invalid
from cnbrain.federation.codec import WireError
from cnbrain.federation.forward_queries import MAX_CURSOR
from cnbrain.regional.schemas import (
    RequestPage,
    RequestView,
    UsagePage,
    UsageReport,
    UsageReportRow,
    UsageTotals,
    UsageView,
)

MIN_ID: Final = -(2**31)
MAX_ID: Final = 2**31 - 1
"""The range of a usage record's id (a 32-bit column)."""

ID: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
"""A region's or request's id as the federation writes them."""

_T = TypeVar("_T")
_K = TypeVar("_K", tuple[datetime, str], tuple[datetime, str, int])


class WrongPageError(WireError):
    """Region `region`'s page breaks the merge's contract (module docstring): a peer's
    answer out of bounds (the federated reads answer it as that region unavailable)."""

    def __init__(self, region: str, reason: str) -> None:
        super().__init__(f"region {region!r}: {reason}")
        self.region = region
        self.reason = reason


def encode(values: list[Any]) -> str:
    """An opaque, URL-safe cursor holding `values`, in the form of a brain's own cursors."""
    raw = json.dumps(values, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _values(cursor: str, arity: int) -> list[Any]:
    """The values of a cursor made by `encode`; Invalid naming `cursor` otherwise."""
    wrong = Invalid("not a cursor this federation issued", field="cursor")
    if not 1 <= len(cursor) <= MAX_CURSOR or has_control_characters(cursor):
        raise wrong
    try:
        values = json.loads(base64.urlsafe_b64decode((cursor + "=" * (-len(cursor) % 4)).encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise wrong from None
    if not isinstance(values, list) or len(values) != arity:
        raise wrong
    return values


def _moment(value: Any) -> datetime:
    if not isinstance(value, str) or len(value) > 64:
        raise Invalid("not a cursor this federation issued", field="cursor")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise Invalid("not a cursor this federation issued", field="cursor") from None
    return utc(moment)


def utc(moment: datetime) -> datetime:
    """`moment` in UTC (a naive one taken as UTC, as every stored time is)."""
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def request_cursor(cursor: str) -> tuple[datetime, str]:
    """The (created_at, id) position of a listing's cursor. Raises Invalid (field `cursor`)
    for one that is not a listing's cursor: not base64 JSON, not [moment, request id]."""
    at, last_id = _values(cursor, 2)
    if not isinstance(last_id, str) or not ID.fullmatch(last_id):
        raise Invalid("not a cursor this federation issued", field="cursor")
    return _moment(at), last_id


def request_cursor_of(at: datetime, request_id: str) -> str:
    """The cursor of a listing whose last request is (`at`, `request_id`)."""
    return encode([utc(at).isoformat(), request_id])


@dataclass(frozen=True, slots=True)
class UsageCursor:
    """A position in the federation's usage records: after (ended_at, region, id)."""

    at: datetime
    region: str
    id: int

    def local_for(self, region: str) -> str:
        """Region `region`'s own cursor for the records after this position: every record
        ending at `at` comes before this position in a region ordered before `region`, after
        it in one ordered after."""
        return encode([self.at.isoformat(), self.last_id_in(region)])

    def last_id_in(self, region: str) -> int:
        """The id of the last record of region `region` at or before this position, as its
        own cursor takes it (`local_for`)."""
        if region < self.region:
            return MAX_ID
        return MIN_ID if region > self.region else self.id

    def text(self) -> str:
        return encode([self.at.isoformat(), self.region, self.id])


def usage_cursor(cursor: str) -> UsageCursor:
    """The position of a federated usage cursor. Raises Invalid (field `cursor`) for one
    that is not: not base64 JSON, not [moment, region, id of 32 bits]."""
    at, region, last_id = _values(cursor, 3)
    if not isinstance(region, str) or not ID.fullmatch(region):
        raise Invalid("not a cursor this federation issued", field="cursor")
    if not isinstance(last_id, int) or isinstance(last_id, bool) or not MIN_ID <= last_id <= MAX_ID:
        raise Invalid("not a cursor this federation issued", field="cursor")
    return UsageCursor(at=_moment(at), region=region, id=last_id)


@dataclass(frozen=True, slots=True)
class _Merged(Generic[_T]):
    items: list[tuple[str, _T]]
    more: bool


def _merge(
    parts: Sequence[tuple[str, Sequence[_T], bool]],
    key: Callable[[str, _T], _K],
    *,
    limit: int,
    newest_first: bool,
) -> _Merged[_T]:
    """The first `limit` items of `parts` (each: region, its items in order, whether it has
    more) in order within every bound (module docstring), and whether more follow."""
    tagged = [(key(region, item), region, item) for region, items, _ in parts for item in items]
    tagged.sort(key=lambda one: one[0], reverse=newest_first)
    bounds = [key(region, items[-1]) for region, items, more in parts if more]
    if bounds:
        bound = max(bounds) if newest_first else min(bounds)
        tagged = [t for t in tagged if (t[0] >= bound if newest_first else t[0] <= bound)]
    taken = tagged[:limit]
    more = bool(bounds) or len(tagged) > limit
    return _Merged(items=[(region, item) for _, region, item in taken], more=more)


def _check_order(
    region: str, keys: list[_K], *, after: _K | None, newest_first: bool, limit: int, more: bool
) -> None:
    if len(keys) > limit:
        raise WrongPageError(region, f"{len(keys)} items, not at most {limit}")
    if more and not keys:
        raise WrongPageError(region, "no item, yet a next cursor")
    previous = after
    for one in keys:
        if previous is not None and not (one < previous if newest_first else one > previous):
            raise WrongPageError(region, "items out of order, or not after the cursor")
        previous = one


def _request_key(_region: str, view: RequestView) -> tuple[datetime, str]:
    return utc(view.created_at), view.id


def merge_requests(
    pages: Sequence[tuple[str, RequestPage]],
    *,
    limit: int,
    after: tuple[datetime, str] | None,
    state: str | None,
    tenant: str | None,
) -> RequestPage:
    """The federation's page of the listing after `after` (None: from the start) of at most
    `limit` requests, from each region's page (region id, its page after `after`). `state`
    and `tenant` (None: any) are what each page was asked for. Raises WrongPageError for a page
    out of its contract."""
    seen: set[str] = set()
    for region, page in pages:
        _check_order(
            region,
            [_request_key(region, v) for v in page.items],
            after=after,
            newest_first=True,
            limit=limit,
            more=page.next_cursor is not None,
        )
        for view in page.items:
            if state is not None and view.state != state:
                raise WrongPageError(region, f"request {view.id!r} is not {state}")
            if tenant is not None and view.tenant != tenant:
                raise WrongPageError(region, f"request {view.id!r} is not of tenant {tenant!r}")
            if view.id in seen:
                raise WrongPageError(region, f"request {view.id!r} is listed by another region")
            seen.add(view.id)
    merged = _merge(
        [(region, page.items, page.next_cursor is not None) for region, page in pages],
        _request_key,
        limit=limit,
        newest_first=True,
    )
    last = merged.items[-1][1] if merged.items else None
    return RequestPage(
        items=[view for _, view in merged.items],
        next_cursor=(
            request_cursor_of(last.created_at, last.id)
            if merged.more and last is not None
            else None
        ),
    )


def _usage_key(region: str, view: UsageView) -> tuple[datetime, str, int]:
    return utc(view.ended_at), region, view.id


def merge_usage(
    pages: Sequence[tuple[str, UsagePage]],
    *,
    limit: int,
    after: UsageCursor | None,
    tenant: str | None,
    start: datetime,
    end: datetime,
) -> UsagePage:
    """The federation's page of usage records of [start, end) after `after` (None: from the
    start) of at most `limit`, with the period's totals summed over the regions, from each
    region's page (region id, its page after `after.local_for(region)`). `tenant` is the
    caller's scope (None: every tenant). Raises WrongPageError for a page out of its contract."""
    for region, page in pages:
        if utc(page.start) != start or utc(page.end) != end or page.tenant != tenant:
            raise WrongPageError(region, "a page of another period or tenant")
        local_after = None if after is None else (after.at, region, after.last_id_in(region))
        _check_order(
            region,
            [_usage_key(region, v) for v in page.items],
            after=local_after,
            newest_first=False,
            limit=limit,
            more=page.next_cursor is not None,
        )
        for view in page.items:
            if tenant is not None and view.tenant != tenant:
                raise WrongPageError(region, f"record {view.id} is not of tenant {tenant!r}")
            if not start <= utc(view.ended_at) < end:
                raise WrongPageError(region, f"record {view.id} ended outside the period")
    merged = _merge(
        [(region, page.items, page.next_cursor is not None) for region, page in pages],
        _usage_key,
        limit=limit,
        newest_first=False,
    )
    last = merged.items[-1] if merged.items else None
    return UsagePage(
        tenant=tenant,
        start=start,
        end=end,
        totals=sum_totals([page.totals for _, page in pages]),
        items=[view for _, view in merged.items],
        next_cursor=(
            UsageCursor(at=utc(last[1].ended_at), region=last[0], id=last[1].id).text()
            if merged.more and last is not None
            else None
        ),
    )


def merge_reports(
    reports: Sequence[tuple[str, UsageReport]],
    *,
    tenant: str | None,
    start: datetime,
    end: datetime,
) -> UsageReport:
    """The federation's usage report of [start, end): every region's rows, ordered by
    tenant, site and kind of scheduler, and each tenant's totals summed over the regions.
    `tenant` is the caller's scope (None: any). Raises WrongPageError for a report of another
    period, or with a row of another tenant."""
    rows: list[UsageReportRow] = []
    per_tenant: dict[str, list[UsageTotals]] = {}
    for region, report in reports:
        if utc(report.start) != start or utc(report.end) != end:
            raise WrongPageError(region, "a report of another period")
        for row in report.rows:
            if tenant is not None and row.tenant != tenant:
                raise WrongPageError(region, f"a row of tenant {row.tenant!r}")
        rows.extend(report.rows)
        for tenant_id, totals in report.tenants.items():
            if tenant is not None and tenant_id != tenant:
                raise WrongPageError(region, f"totals of tenant {tenant_id!r}")
            per_tenant.setdefault(tenant_id, []).append(totals)
    rows.sort(key=lambda row: (row.tenant, row.site, row.simulated))
    return UsageReport(
        start=start,
        end=end,
        rows=rows,
        tenants={t: sum_totals(group) for t, group in sorted(per_tenant.items())},
    )


def sum_totals(all_totals: Sequence[UsageTotals]) -> UsageTotals:
    """The sum of `all_totals`, field by field."""
    return UsageTotals(
        **{
            name: sum(getattr(totals, name) for totals in all_totals)
            for name in UsageTotals.model_fields
        }
    )
