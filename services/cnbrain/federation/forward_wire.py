"""Forwarded calls on the wire (`ForwardedCall`, `ForwardedAnswer`): the bounds every brain
checks on what a peer sends, and the provinces a forwarded submission is for.

A tenant's REST call that one regional brain takes and another region must answer goes to
the national brain (`Forward`), which hands it to that region (`ServeForwarded`); every hop
checks the call, and the answer on its way back, with `check_call` and `check_answer`.
"""

import json
import re
from typing import Any, Final, get_args

from cnbrain.domain.bounds import has_control_characters
from cnbrain.domain.errors import Invalid
from cnbrain.domain.tenancy import STAFF, TenancyRole
from cnbrain.federation.forward_queries import QUERIES, query_of
from cnbrain.v1 import common_pb2

MAX_BODY: Final = 1 << 20
"""Characters of a forwarded submission's or quote's body."""

MAX_ANSWER: Final = 3 << 20
"""Characters of a forwarded call's answer body."""

MAX_IDEMPOTENCY_KEY: Final = 200
"""Characters of an Idempotency-Key (as the REST API takes it)."""

MAX_RETRY_AFTER_S: Final = 3600

FORWARD_DEADLINE_S: Final = 30.0
"""Deadline of a forwarded call from the brain that took it: the owner's submission may
itself be placed across regions (15 s at most), after its group commit."""

SERVE_DEADLINE_S: Final = 25.0
"""Deadline of the national brain's call to the region that answers a forwarded
submission or quote (within `FORWARD_DEADLINE_S`)."""

ID: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
"""A user's, tenant's or request's id as the federation's tenancy writes them."""

ROLES: Final = frozenset(get_args(TenancyRole))
TENANT_ROLES: Final = ROLES - STAFF

CONTENT_TYPES: Final = frozenset({"application/json", "application/problem+json"})


SUBMIT: Final = common_pb2.FORWARDED_OPERATION_SUBMIT
SUBMIT_GROUP: Final = common_pb2.FORWARDED_OPERATION_SUBMIT_GROUP
QUOTE: Final = common_pb2.FORWARDED_OPERATION_QUOTE
GET: Final = common_pb2.FORWARDED_OPERATION_GET
EVENTS: Final = common_pb2.FORWARDED_OPERATION_EVENTS
CANCEL: Final = common_pb2.FORWARDED_OPERATION_CANCEL
WITH_BODY: Final = frozenset({SUBMIT, SUBMIT_GROUP, QUOTE})
READS: Final = frozenset({GET, EVENTS, CANCEL})
"""Calls about one request, sent to every other region: the one that holds it answers."""
OPERATIONS: Final = WITH_BODY | READS | QUERIES


def check_call(call: common_pb2.ForwardedCall) -> dict[str, Any] | None:
    """Check `call` as a peer sent it; the body of a submission or quote (a JSON object),
    None for a read or a query (`forward_queries.query_of` reads a query's). A query names
    the region that must answer it (`region_id`), no other call does. Raises Invalid naming
    the field out of bounds."""
    if call.operation not in OPERATIONS:
        raise Invalid(f"unknown operation {call.operation}", field="operation")
    caller = call.caller
    if not ID.fullmatch(caller.user_id):
        raise Invalid("must be 1 to 64 letters, digits, '_', '.' or '-'", field="caller.user_id")
    if caller.role not in ROLES:
        raise Invalid(f"must be one of {', '.join(sorted(ROLES))}", field="caller.role")
    if caller.role in TENANT_ROLES:
        if not ID.fullmatch(caller.tenant_id):
            raise Invalid(
                "a tenant role's tenant must be 1 to 64 letters, digits, '_', '.' or '-'",
                field="caller.tenant_id",
            )
    elif caller.tenant_id:
        raise Invalid("staff carry no tenant", field="caller.tenant_id")
    key = call.idempotency_key
    if len(key) > MAX_IDEMPOTENCY_KEY or has_control_characters(key):
        raise Invalid(
            f"at most {MAX_IDEMPOTENCY_KEY} characters, without control characters",
            field="idempotency_key",
        )
    if call.operation in QUERIES:
        if not ID.fullmatch(call.region_id):
            raise Invalid("a query names the region that must answer it", field="region_id")
        if call.request_id or key:
            raise Invalid(
                "a query carries no request id and no idempotency key", field="request_id"
            )
        query_of(call.operation, call.body_json)
        return None
    if call.region_id:
        raise Invalid("only a query names the region that must answer it", field="region_id")
    if call.operation in READS:
        if not ID.fullmatch(call.request_id):
            raise Invalid("must be 1 to 64 letters, digits, '_', '.' or '-'", field="request_id")
        if call.body_json or key:
            raise Invalid("a read carries no body and no idempotency key", field="body_json")
        return None
    if key and call.operation != SUBMIT:
        raise Invalid("only a submission carries one", field="idempotency_key")
    return body_of(call.body_json)


def body_of(text: str) -> dict[str, Any]:
    """The JSON object in `text` (at most MAX_BODY characters); Invalid otherwise."""
    if len(text) > MAX_BODY:
        raise Invalid(f"at most {MAX_BODY} characters, not {len(text)}", field="body_json")
    try:
        body = json.loads(text)
    except ValueError as wrong:
        raise Invalid(f"not JSON: {wrong}", field="body_json") from None
    if not isinstance(body, dict):
        raise Invalid("must be a JSON object", field="body_json")
    return body


def provinces_of(
    operation: "common_pb2.ForwardedOperation.ValueType", body: dict[str, Any]
) -> list[tuple[str, str]]:
    """The source provinces the body of a call `WITH_BODY` names, each with its field: a
    submission's or quote's (`source_province`), or every member's of a group
    (`requests.<i>.source_province`); Invalid naming the field when one names none."""
    if operation != SUBMIT_GROUP:
        return [("source_province", _province(body, "source_province"))]
    members = body.get("requests")
    if not isinstance(members, list) or not members:
        raise Invalid("a forwarded group must list its members", field="requests")
    out = []
    for i, member in enumerate(members):
        field = f"requests.{i}.source_province"
        if not isinstance(member, dict):
            raise Invalid("must be a JSON object", field=f"requests.{i}")
        out.append((field, _province(member, field)))
    return out


def check_group_region(first: str, field: str, province: str, region: str) -> None:
    """Raise Invalid naming `field` when `province`, a group member's, is of `region` and
    that is not `first`, the region of the group's first member: one region places a
    group."""
    if region != first:
        raise Invalid(
            f"province {province!r} is region {region!r}'s, not {first!r}'s as the first "
            "member's: a group's members come from one region",
            field=field,
        )


def _province(body: dict[str, Any], field: str) -> str:
    province = body.get("source_province")
    if not isinstance(province, str) or not province:
        raise Invalid("a forwarded request must name its source province", field=field)
    return province


def check_answer(answer: common_pb2.ForwardedAnswer) -> common_pb2.ForwardedAnswer:
    """`answer` as a peer sent it, if it is within bounds; Invalid naming the field not."""
    if not 200 <= answer.status <= 599:
        raise Invalid(f"must be within [200, 599], not {answer.status}", field="status")
    if len(answer.body_json) > MAX_ANSWER:
        raise Invalid(f"at most {MAX_ANSWER} characters", field="body_json")
    if answer.content_type not in CONTENT_TYPES:
        raise Invalid(f"must be one of {', '.join(sorted(CONTENT_TYPES))}", field="content_type")
    if not 0 <= answer.retry_after_s <= MAX_RETRY_AFTER_S:
        raise Invalid(f"must be within [0, {MAX_RETRY_AFTER_S}]", field="retry_after_s")
    if not ID.fullmatch(answer.region_id):
        raise Invalid("must be a region's id", field="region_id")
    return answer
