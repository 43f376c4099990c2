"""The queries a brain asks every other region of the federation (`docs/federation.md`, "Any
brain, any request"): one region's page of the request listing (LIST), of the usage records
(USAGE), and its usage report (USAGE_REPORT). Each travels as a small JSON object in a
forwarded call's `body_json`, made by `text_of` and checked by `query_of` on every hop: known
keys only, each of its type and within its bounds, the whole at most `MAX_QUERY` characters.

The period of a usage query is always explicit (the brain that took the call fixes it once),
so every region sums the same period.
"""

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Final

from cnbrain.domain.bounds import has_control_characters
from cnbrain.domain.errors import Invalid
from cnbrain.domain.states import RequestState
from cnbrain.v1 import common_pb2

MAX_QUERY: Final = 4096
"""Characters of a query's JSON."""

MAX_CURSOR: Final = 512
"""Characters of a cursor in a query (and of one a caller sends to a federated listing)."""

MAX_TENANT: Final = 64
MAX_LIST_LIMIT: Final = 500
MAX_USAGE_LIMIT: Final = 1000

LIST: Final = common_pb2.FORWARDED_OPERATION_LIST
USAGE: Final = common_pb2.FORWARDED_OPERATION_USAGE
USAGE_REPORT: Final = common_pb2.FORWARDED_OPERATION_USAGE_REPORT
QUERIES: Final = frozenset({LIST, USAGE, USAGE_REPORT})

_STATES: Final = frozenset(RequestState)


@dataclass(frozen=True, slots=True)
class ListQuery:
    """One region's page of `GET /v1/requests`: its `state` filter, `limit`, and the cursor
    in that region's own listing (None: from the start)."""

    state: str | None
    limit: int
    cursor: str | None


@dataclass(frozen=True, slots=True)
class UsageQuery:
    """One region's page of `GET /v1/usage` over [start, end) (UTC), for `tenant` (None:
    the caller's scope), from `cursor` in that region's records."""

    start: datetime
    end: datetime
    tenant: str | None
    limit: int
    cursor: str | None


@dataclass(frozen=True, slots=True)
class ReportQuery:
    """One region's `GET /v1/usage/report` over [start, end) (UTC), for `tenant`."""

    start: datetime
    end: datetime
    tenant: str | None


Query = ListQuery | UsageQuery | ReportQuery


def operation_of(query: Query) -> "common_pb2.ForwardedOperation.ValueType":
    """The forwarded operation that carries `query`."""
    if isinstance(query, ListQuery):
        return LIST
    return USAGE if isinstance(query, UsageQuery) else USAGE_REPORT


def text_of(query: Query) -> str:
    """`query` as the JSON a forwarded call carries (checked as `query_of` will be)."""
    fields: dict[str, Any] = asdict(query)
    for name in ("start", "end"):
        if name in fields:
            fields[name] = fields[name].isoformat()
    text = json.dumps(fields, separators=(",", ":"))
    query_of(operation_of(query), text)
    return text


def query_of(operation: "common_pb2.ForwardedOperation.ValueType", text: str) -> Query:
    """The query of `operation` in `text`. Raises Invalid naming the field out of bounds
    (`body_json` for the object itself, else `body_json.<key>`)."""
    if len(text) > MAX_QUERY:
        raise Invalid(f"a query is at most {MAX_QUERY} characters", field="body_json")
    try:
        fields = json.loads(text)
    except ValueError as wrong:
        raise Invalid(f"not JSON: {wrong}", field="body_json") from None
    if not isinstance(fields, dict):
        raise Invalid("a query must be a JSON object", field="body_json")
    if operation == LIST:
        _keys(fields, {"state", "limit", "cursor"})
        state = _optional_text(fields, "state", 32)
        if state is not None and state not in _STATES:
            raise Invalid(f"must be one of {', '.join(RequestState)}", field="body_json.state")
        return ListQuery(
            state=state,
            limit=_limit(fields, MAX_LIST_LIMIT),
            cursor=_optional_text(fields, "cursor", MAX_CURSOR),
        )
    if operation == USAGE:
        _keys(fields, {"start", "end", "tenant", "limit", "cursor"})
        start, end = _period(fields)
        return UsageQuery(
            start=start,
            end=end,
            tenant=_optional_text(fields, "tenant", MAX_TENANT),
            limit=_limit(fields, MAX_USAGE_LIMIT),
            cursor=_optional_text(fields, "cursor", MAX_CURSOR),
        )
    if operation == USAGE_REPORT:
        _keys(fields, {"start", "end", "tenant"})
        start, end = _period(fields)
        return ReportQuery(
            start=start, end=end, tenant=_optional_text(fields, "tenant", MAX_TENANT)
        )
    raise Invalid(f"operation {operation} carries no query", field="operation")


def _keys(fields: dict[str, Any], known: set[str]) -> None:
    if set(fields) != known:
        raise Invalid(f"a query has exactly the keys {', '.join(sorted(known))}", field="body_json")


def _optional_text(fields: dict[str, Any], name: str, most: int) -> str | None:
    value = fields[name]
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= most or has_control_characters(value):
        raise Invalid(
            f"null or 1 to {most} characters without control characters", field=f"body_json.{name}"
        )
    return value


def _limit(fields: dict[str, Any], most: int) -> int:
    value = fields["limit"]
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise Invalid(f"must be an integer within [1, {most}]", field="body_json.limit")
    return value


def _period(fields: dict[str, Any]) -> tuple[datetime, datetime]:
    moments: list[datetime] = []
    for name in ("start", "end"):
        value = fields[name]
        try:
            if not isinstance(value, str) or len(value) > 64:
                raise ValueError(value)
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise Invalid("must be an ISO 8601 moment", field=f"body_json.{name}") from None
        if moment.tzinfo is None:
            raise Invalid("must carry its zone", field=f"body_json.{name}")
        moments.append(moment.astimezone(UTC))
    start, end = moments
    if start >= end:
        raise Invalid("the period is empty: start is not before end", field="body_json.start")
    return start, end
