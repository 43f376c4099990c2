"""The tenant API: submit, read, list and cancel requests, and read their events; quotes."""

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query, Response

from cnbrain.domain.states import RequestState
from cnbrain.regional.deps import PrincipalDep, UseCasesDep
from cnbrain.regional.openapi import BODY_MODEL
from cnbrain.regional.problems import ApiError, Problem, responses
from cnbrain.regional.schemas import (
    EXAMPLE_REQUEST,
    QueuePage,
    Quote,
    RequestEventList,
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
    openapi_extra={BODY_MODEL: "SubmittedRequest"},
)
async def submit(
    body: RequestBody,
    principal: PrincipalDep,
    cases: UseCasesDep,
    idempotency_key: Annotated[
        str | None,
        Header(max_length=200, description="Retries with the same key return the first answer."),
    ] = None,
) -> Response:
    view, created = await cases.submit(principal, body, idempotency_key=idempotency_key)
    # Serialised here, once, by the model itself (the view is valid by construction), rather
    # than validated again and encoded by FastAPI; `response_model` documents it.
    return Response(
        view.model_dump_json(),
        status_code=201 if created else 200,
        media_type="application/json",
        headers={"Location": f"/v1/requests/{view.id}"},
    )


@router.get("/requests", response_model=RequestPage, responses=ERRORS, summary="List requests")
async def list_requests(
    principal: PrincipalDep,
    cases: UseCasesDep,
    state: Annotated[str | None, Query(description=f"One of {', '.join(RequestState)}.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None, Query(description="From the previous page's next_cursor.")
    ] = None,
) -> RequestPage:
    if state is not None and state not in _REQUEST_STATES:
        raise ApiError(
            422, "Unprocessable Content", f"state: must be one of {', '.join(RequestState)}"
        )
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
    return await cases.read.queue(principal, after=after, limit=limit)


@router.get(
    "/requests/{request_id}", response_model=RequestView, responses=ERRORS, summary="Get a request"
)
async def get_request(request_id: str, principal: PrincipalDep, cases: UseCasesDep) -> RequestView:
    return await cases.read.one(principal, request_id)


@router.get(
    "/requests/{request_id}/events",
    response_model=RequestEventList,
    responses={404: ERRORS[404], 401: ERRORS[401]},
    summary="What happened to the request, oldest first: submitted, placed, started, ended...",
)
async def list_events(
    request_id: str, principal: PrincipalDep, cases: UseCasesDep
) -> RequestEventList:
    return await cases.events(principal, request_id)


@router.post(
    "/requests/{request_id}/cancel",
    response_model=RequestView,
    responses={**ERRORS, 409: {"model": Problem, "description": "The request has already ended."}},
    summary="Cancel a request and release everything it holds",
)
async def cancel(request_id: str, principal: PrincipalDep, cases: UseCasesDep) -> RequestView:
    return await cases.cancel(principal, request_id)


@router.post(
    "/quotes",
    response_model=Quote,
    responses=ERRORS,
    summary="What the brain would decide now, with alternatives; nothing is reserved",
    openapi_extra={BODY_MODEL: "SubmittedRequest"},
)
async def quote(body: RequestBody, principal: PrincipalDep, cases: UseCasesDep) -> Quote:
    return await cases.quote(principal, body)
