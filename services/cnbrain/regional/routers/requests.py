"""The tenant API: submit, read, list and cancel requests, and read their events; quotes.

In a federation, a submission or quote whose source province another region owns is
forwarded to that region's brain, and a request (or its events) this brain does not hold is
read, or cancelled, on the region that holds it (`regional.forwarding`); the answer is that
brain's. The listing is the whole federation's (`regional.federated_reads`)."""

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query, Response

from cnbrain.domain.errors import NotFound
from cnbrain.domain.states import RequestState
from cnbrain.regional.deps import (
    FederatedReadsDep,
    ForwarderDep,
    PrincipalDep,
    UseCasesDep,
)
from cnbrain.regional.openapi import BODY_MODEL
from cnbrain.regional.problems import ApiError, Problem, responses
from cnbrain.regional.schemas import (
    EXAMPLE_REQUEST,
    QueuePage,
    Quote,
    RequestEventList,
    RequestGroupBody,
    RequestGroupView,
    RequestPage,
    RequestView,
)

router = APIRouter(prefix="/v1", tags=["requests"])

_REQUEST_STATES = frozenset(RequestState)

ERRORS = responses(
    {
        401: "No valid API key.",
        403: "A tenant role naming another tenant.",
        404: "No such request for this tenant.",
        422: "The request is malformed; `errors` names the fields.",
        429: "The tenant's rate limit is reached; see Retry-After.",
    }
)

FORWARDED = (
    " In a federation, a request whose `source_province` another region owns is forwarded, "
    "through the national brain, to that region's brain, and its answer (status, body, "
    "Retry-After) is this answer; the request then lives there. 503 names the national "
    "brain or the region that cannot be reached."
)
READ_ANYWHERE = (
    " In a federation, a request another region holds is read from that region's brain "
    "(same tenant rules); 503 names the regions that could not be asked when none that "
    "answered holds it."
)
CANCEL_ANYWHERE = (
    " In a federation, a request another region holds is cancelled on that region's brain "
    "(same tenant rules; its answer, 409 for one that has ended, is this answer); 503 names "
    "the regions that could not be asked when none that answered holds it."
)
LIST_ANYWHERE = (
    " In a federation, the listing is every region's: each region's requests in the caller's "
    "scope, merged newest first, and `next_cursor` works on any brain. When a region cannot "
    "be asked (or it, or the national brain, does not answer), the answer is 503 naming it, "
    "with Retry-After: a page is never given without a region's part; a region's refusal "
    "(say 403, a caller it does not know yet) is the answer."
)


RequestBody = Annotated[
    dict[str, Any],
    Body(
        description="A placement request (see docs/placement.md).",
        openapi_examples={
            "gpu-training": {"summary": "8 A100 from Zhejiang", "value": EXAMPLE_REQUEST}
        },
    ),
]


@router.post(
    "/requests",
    response_model=RequestView,
    status_code=201,
    responses={
        **ERRORS,
        200: {
            "model": RequestView,
            "description": "An earlier submission with the same Idempotency-Key.",
        },
    },
    summary="Submit a request: it is decided and reserved at once",
    description="Decided here when its source province is this region's." + FORWARDED,
    openapi_extra={BODY_MODEL: "SubmittedRequest"},
)
async def submit(
    body: RequestBody,
    principal: PrincipalDep,
    cases: UseCasesDep,
    forwarder: ForwarderDep,
    idempotency_key: Annotated[
        str | None,
        Header(max_length=200, description="Retries with the same key return the first answer."),
    ] = None,
) -> Response:
    if forwarder is not None and forwarder.owner_of(body) is not None:
        return await forwarder.submit(principal, body, idempotency_key=idempotency_key)
    view, created = await cases.submit(principal, body, idempotency_key=idempotency_key)
    # Serialised here, once, by the model itself (the view is valid by construction), rather
    # than validated again and encoded by FastAPI; `response_model` documents it.
    return Response(
        view.model_dump_json(),
        status_code=201 if created else 200,
        media_type="application/json",
        headers={"Location": f"/v1/requests/{view.id}"},
    )


@router.get(
    "/requests",
    response_model=RequestPage,
    responses={**ERRORS, 503: {"model": Problem, "description": "A region did not answer."}},
    summary="List requests",
    description="The caller's requests (staff: all), newest first." + LIST_ANYWHERE,
)
async def list_requests(
    principal: PrincipalDep,
    cases: UseCasesDep,
    federated: FederatedReadsDep,
    state: Annotated[str | None, Query(description=f"One of {', '.join(RequestState)}.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None, Query(description="From the previous page's next_cursor.")
    ] = None,
) -> RequestPage | Response:
    if state is not None and state not in _REQUEST_STATES:
        raise ApiError(
            422, "Unprocessable Content", f"state: must be one of {', '.join(RequestState)}"
        )
    if federated is not None:
        return await federated.requests(principal, state=state, limit=limit, cursor=cursor)
    return await cases.read.page(principal, state=state, limit=limit, cursor=cursor)


@router.get(
    "/queue",
    response_model=QueuePage,
    responses=ERRORS,
    summary="The region's admission queue, in order (a tenant's users see their own requests)",
)
async def list_queue(
    principal: PrincipalDep,
    cases: UseCasesDep,
    after: Annotated[
        int, Query(ge=-1, le=10**9, description="From the previous page's next_after.")
    ] = -1,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> QueuePage:
    """The requests waiting in this region's admission queue, in the order they will be
    admitted: each with its position, when it is expected to start and on which site, and why
    it waits. A tenant's users see their own tenant's; staff see all. Pages on `next_after`."""
    return await cases.read.queue(principal, after=after, limit=limit)


@router.get(
    "/requests/{request_id}",
    response_model=RequestView,
    responses=ERRORS,
    summary="Get a request",
    description="A request of the caller's tenant (staff: any)." + READ_ANYWHERE,
)
async def get_request(
    request_id: str, principal: PrincipalDep, cases: UseCasesDep, forwarder: ForwarderDep
) -> RequestView | Response:
    try:
        return await cases.read.one(principal, request_id)
    except NotFound:
        if forwarder is None or not forwarder.may_read(request_id):
            raise
    return await forwarder.read(principal, request_id, events=False)


@router.get(
    "/requests/{request_id}/events",
    response_model=RequestEventList,
    responses={404: ERRORS[404], 401: ERRORS[401], 403: ERRORS[403]},
    summary="What happened to the request, oldest first: submitted, placed, started, ended...",
    description="The events of a request of the caller's tenant (staff: any)." + READ_ANYWHERE,
)
async def list_events(
    request_id: str, principal: PrincipalDep, cases: UseCasesDep, forwarder: ForwarderDep
) -> RequestEventList | Response:
    try:
        return await cases.events(principal, request_id)
    except NotFound:
        if forwarder is None or not forwarder.may_read(request_id):
            raise
    return await forwarder.read(principal, request_id, events=True)


@router.post(
    "/requests/{request_id}/cancel",
    response_model=RequestView,
    responses={**ERRORS, 409: {"model": Problem, "description": "The request has already ended."}},
    summary="Cancel a request and release everything it holds",
    description="A request of the caller's tenant (staff: any)." + CANCEL_ANYWHERE,
)
async def cancel(
    request_id: str, principal: PrincipalDep, cases: UseCasesDep, forwarder: ForwarderDep
) -> RequestView | Response:
    try:
        return await cases.cancel(principal, request_id)
    except NotFound:
        if forwarder is None or not forwarder.may_read(request_id):
            raise
    return await forwarder.cancel(principal, request_id)


@router.post(
    "/request-groups",
    response_model=RequestGroupView,
    status_code=201,
    responses=ERRORS,
    summary="Submit related requests, placed together or spread, all of them or none",
    description="Every member is stored, placed or rejected with the others, in one region: "
    "`together` on one site (or one province), `spread` each on a site of its own. A member "
    'starts "now" and moves no data. In a federation, a group every member of which comes '
    "from provinces of another region is forwarded through the national brain to that "
    "region's brain, which decides it and holds its members; its answer is this answer.",
)
async def submit_group(
    body: RequestGroupBody, principal: PrincipalDep, cases: UseCasesDep, forwarder: ForwarderDep
) -> RequestGroupView | Response:
    if forwarder is not None and forwarder.group_owner(body) is not None:
        return await forwarder.submit_group(principal, body)
    return await cases.submit_group(principal, body)


@router.post(
    "/quotes",
    response_model=Quote,
    responses=ERRORS,
    summary="What the brain would decide now, with alternatives; nothing is reserved",
    description="Decided as a submission here would be." + FORWARDED,
    openapi_extra={BODY_MODEL: "SubmittedRequest"},
)
async def quote(
    body: RequestBody, principal: PrincipalDep, cases: UseCasesDep, forwarder: ForwarderDep
) -> Quote | Response:
    if forwarder is not None and forwarder.owner_of(body) is not None:
        return await forwarder.quote(principal, body)
    return await cases.quote(principal, body)
