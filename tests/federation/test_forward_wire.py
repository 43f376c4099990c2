"""The bounds every brain checks on a forwarded call (its query included) and its answer."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from cnbrain.domain.errors import Invalid
from cnbrain.federation.forward_queries import (
    ListQuery,
    ReportQuery,
    UsageQuery,
    operation_of,
    query_of,
    text_of,
)
from cnbrain.federation.forward_wire import (
    MAX_BODY,
    SUBMIT_GROUP,
    check_answer,
    check_call,
    provinces_of,
)
from cnbrain.v1 import common_pb2

TENANT_USER = {"user_id": "u-1", "role": "tenant-user", "tenant_id": "acme"}


def _call(caller: dict[str, str] = TENANT_USER, **fields: Any) -> common_pb2.ForwardedCall:
    return common_pb2.ForwardedCall(caller=common_pb2.Caller(**caller), **fields)


def _read_by(**caller: str) -> common_pb2.ForwardedCall:
    """A read of request `r` by the tenant user changed by `caller`."""
    return _call(
        {**TENANT_USER, **caller}, operation=common_pb2.FORWARDED_OPERATION_GET, request_id="r"
    )


SUBMIT = common_pb2.FORWARDED_OPERATION_SUBMIT
QUOTE = common_pb2.FORWARDED_OPERATION_QUOTE
GET = common_pb2.FORWARDED_OPERATION_GET


def test_a_submission_within_bounds_gives_its_body() -> None:
    call = _call(operation=SUBMIT, body_json='{"source_province": "BJ"}', idempotency_key="job-1")
    body = check_call(call)
    assert body == {"source_province": "BJ"}
    assert provinces_of(SUBMIT, body) == [("source_province", "BJ")]
    group = {"requests": [{"source_province": "GD"}, {"source_province": "GX"}]}
    assert provinces_of(SUBMIT_GROUP, group) == [
        ("requests.0.source_province", "GD"),
        ("requests.1.source_province", "GX"),
    ]
    staff = {"user_id": "u-2", "role": "operator", "tenant_id": ""}
    assert check_call(_call(staff, operation=GET, request_id="req-0123456789abcdef")) is None


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (_call(operation=common_pb2.FORWARDED_OPERATION_UNSPECIFIED), "operation"),
        (_call(operation=99), "operation"),
        (_read_by(user_id=""), "caller.user_id"),
        (
            _read_by(user_id="u\n1"),
            "caller.user_id",
        ),
        (_read_by(role="root"), "caller.role"),
        (
            _read_by(tenant_id=""),
            "caller.tenant_id",
        ),
        (_read_by(role="admin"), "caller.tenant_id"),
        (_call(operation=GET, request_id=""), "request_id"),
        (_call(operation=GET, request_id="x" * 65), "request_id"),
        (_call(operation=GET, request_id="r", body_json="{}"), "body_json"),
        (_call(operation=SUBMIT, body_json="{", idempotency_key="k"), "body_json"),
        (_call(operation=SUBMIT, body_json="[]"), "body_json"),
        (_call(operation=SUBMIT, body_json=" " * (MAX_BODY + 1)), "body_json"),
        (_call(operation=SUBMIT, body_json="{}", idempotency_key="k" * 201), "idempotency_key"),
        (_call(operation=SUBMIT, body_json="{}", idempotency_key="a\x00b"), "idempotency_key"),
        (_call(operation=QUOTE, body_json="{}", idempotency_key="k"), "idempotency_key"),
    ],
)
def test_a_call_out_of_bounds_is_refused_naming_the_field(
    call: common_pb2.ForwardedCall, field: str
) -> None:
    with pytest.raises(Invalid) as refused:
        check_call(call)
    assert refused.value.field == field


@pytest.mark.parametrize("body", [{}, {"source_province": ""}, {"source_province": 3}])
def test_a_forwarded_body_names_its_province(body: dict[str, Any]) -> None:
    with pytest.raises(Invalid) as refused:
        provinces_of(SUBMIT, body)
    assert refused.value.field == "source_province"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "requests"),
        ({"requests": []}, "requests"),
        ({"requests": {"source_province": "GD"}}, "requests"),
        ({"requests": [{"source_province": "GD"}, "GD"]}, "requests.1"),
        ({"requests": [{"source_province": "GD"}, {}]}, "requests.1.source_province"),
    ],
)
def test_a_forwarded_group_names_every_members_province(body: dict[str, Any], field: str) -> None:
    with pytest.raises(Invalid) as refused:
        provinces_of(SUBMIT_GROUP, body)
    assert refused.value.field == field


def _answer(**fields: Any) -> common_pb2.ForwardedAnswer:
    base: dict[str, Any] = {
        "status": 201,
        "body_json": "{}",
        "content_type": "application/json",
        "region_id": "north",
    }
    return common_pb2.ForwardedAnswer(**{**base, **fields})


def test_an_answer_within_bounds_is_taken() -> None:
    answer = _answer(status=503, content_type="application/problem+json", retry_after_s=5)
    assert check_answer(answer) is answer


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"status": 0}, "status"),
        ({"status": 199}, "status"),
        ({"status": 600}, "status"),
        ({"content_type": "text/html"}, "content_type"),
        ({"retry_after_s": -1}, "retry_after_s"),
        ({"retry_after_s": 3601}, "retry_after_s"),
        ({"region_id": ""}, "region_id"),
        ({"body_json": "x" * ((3 << 20) + 1)}, "body_json"),
    ],
)
def test_an_answer_out_of_bounds_is_refused(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(Invalid) as refused:
        check_answer(_answer(**fields))
    assert refused.value.field == field


LIST = common_pb2.FORWARDED_OPERATION_LIST
USAGE = common_pb2.FORWARDED_OPERATION_USAGE
REPORT = common_pb2.FORWARDED_OPERATION_USAGE_REPORT
CANCEL = common_pb2.FORWARDED_OPERATION_CANCEL
LISTING = ListQuery(state="placed", limit=50, cursor=None)
PERIOD = {"start": "2026-11-01T00:00:00+00:00", "end": "2026-12-01T00:00:00+00:00"}


def _query(operation: int, **fields: Any) -> common_pb2.ForwardedCall:
    return _call(operation=operation, region_id="north", body_json=json.dumps(fields))


def test_queries_within_bounds_are_taken_as_they_were_made() -> None:
    start, end = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
    for query in (
        LISTING,
        UsageQuery(start=start, end=end, tenant="acme", limit=1000, cursor="abc"),
        ReportQuery(start=start, end=end, tenant=None),
    ):
        call = _call(operation=operation_of(query), region_id="north", body_json=text_of(query))
        assert check_call(call) is None
        assert query_of(call.operation, call.body_json) == query
    assert check_call(_call(operation=CANCEL, request_id="req-1")) is None


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (_call(operation=LIST, body_json=text_of(LISTING)), "region_id"),
        (_call(operation=LIST, region_id="a b", body_json=text_of(LISTING)), "region_id"),
        (_call(operation=GET, request_id="r", region_id="north"), "region_id"),
        (_call(operation=CANCEL, request_id=""), "request_id"),
        (_call(operation=CANCEL, request_id="r", body_json="{}"), "body_json"),
        (
            _call(operation=LIST, region_id="north", request_id="r", body_json=text_of(LISTING)),
            "request_id",
        ),
        (_call(operation=LIST, region_id="north", body_json="[]"), "body_json"),
        (_call(operation=LIST, region_id="north", body_json="{"), "body_json"),
        (_call(operation=LIST, region_id="north", body_json=" " * 4097), "body_json"),
        (_query(LIST, state=None, limit=50), "body_json"),
        (_query(LIST, state=None, limit=50, cursor=None, more=1), "body_json"),
        (_query(LIST, state="asleep", limit=50, cursor=None), "body_json.state"),
        (_query(LIST, state=None, limit=0, cursor=None), "body_json.limit"),
        (_query(LIST, state=None, limit=501, cursor=None), "body_json.limit"),
        (_query(LIST, state=None, limit=True, cursor=None), "body_json.limit"),
        (_query(LIST, state=None, limit="5", cursor=None), "body_json.limit"),
        (_query(LIST, state=None, limit=5, cursor="c" * 513), "body_json.cursor"),
        (_query(LIST, state=None, limit=5, cursor="a\nb"), "body_json.cursor"),
        (_query(LIST, state=None, limit=5, cursor=""), "body_json.cursor"),
        (_query(USAGE, **PERIOD, tenant=None, limit=1001, cursor=None), "body_json.limit"),
        (_query(USAGE, **PERIOD, tenant="t" * 65, limit=1, cursor=None), "body_json.tenant"),
        (
            _query(
                USAGE,
                start="2026-11-01T00:00:00",
                end=PERIOD["end"],
                tenant=None,
                limit=1,
                cursor=None,
            ),
            "body_json.start",
        ),
        (_query(REPORT, start="soon", end=PERIOD["end"], tenant=None), "body_json.start"),
        (_query(REPORT, start=PERIOD["end"], end=PERIOD["start"], tenant=None), "body_json.start"),
        (_query(REPORT, **PERIOD, tenant=None, limit=5), "body_json"),
    ],
)
def test_a_query_out_of_bounds_is_refused_naming_the_field(
    call: common_pb2.ForwardedCall, field: str
) -> None:
    with pytest.raises(Invalid) as refused:
        check_call(call)
    assert refused.value.field == field
