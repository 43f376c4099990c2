"""Errors as problem details (RFC 9457): every error names what was wrong and where.

Exceptions that no handler takes reach `ErrorEdge`, the outermost layer of the application:
an outage of the database or the cache (see `server_down`) answers 503 with `Retry-After` and
keeps the connection open; anything else is a bug, answered 500 with `Connection: close`.
"""

import logging
from http import HTTPStatus
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cnbrain.domain.errors import CnbrainError, ErrorKind, Exhausted, Invalid
from cnbrain.regional.outages import outage_of

PROBLEM_JSON = "application/problem+json"
RETRY_AFTER_S = 5
"""What a 503 tells the caller to wait before trying again."""
log = logging.getLogger("cnbrain.regional")

Dependency = Literal["database", "cache"]
"""A server the brain needs to answer: its database, or its cache (Redis)."""


class FieldProblem(BaseModel):
    field: str
    message: str


class Problem(BaseModel):
    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[FieldProblem] | None = None
    unavailable: list[Dependency] | None = None
    """With a 503: which servers the brain needs do not answer."""


class ApiError(Exception):
    """An error the API answers with `status` and a problem document."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        *,
        errors: list[FieldProblem] | None = None,
        headers: dict[str, str] | None = None,
        unavailable: list[Dependency] | None = None,
    ) -> None:
        super().__init__(detail)
        self.problem = Problem(
            title=title, status=status, detail=detail, errors=errors, unavailable=unavailable
        )
        self.headers = headers


def responses(described: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for error statuses, each a problem document with its description."""
    return {status: {"model": Problem, "description": text} for status, text in described.items()}


def not_found(kind: str, object_id: str) -> ApiError:
    return ApiError(404, "Not Found", f"{kind} {object_id!r} does not exist")


def forbidden(detail: str) -> ApiError:
    return ApiError(403, "Forbidden", detail)


def conflict(detail: str) -> ApiError:
    return ApiError(409, "Conflict", detail)


def unavailable(detail: str, *, down: list[Dependency] | None = None) -> ApiError:
    """503 with `Retry-After`; `down` names the servers that do not answer, if that is why."""
    return ApiError(
        503,
        "Service Unavailable",
        detail,
        headers={"Retry-After": str(RETRY_AFTER_S)},
        unavailable=down,
    )


def server_down(exc: BaseException) -> Dependency | None:
    """Which of the brain's servers `exc` says does not answer (`outages.outage_of`), or None:
    no outage, or one of another brain (answered as any other error of its kind)."""
    which = outage_of(exc)
    return None if which is None or which == "peer" else which


def _down(which: Dependency) -> Problem:
    name = "database" if which == "database" else "cache (Redis)"
    return unavailable(f"the brain's {name} does not answer; try again later", down=[which]).problem


def _server_error() -> Problem:
    return Problem(
        title="Internal Server Error", status=500, detail="unexpected error; see the brain's log"
    )


class ErrorEdge:
    """The outermost handling of an exception no handler took, before the response began:
    503 problem with `Retry-After` for an outage (`server_down`; the connection stays open),
    else 500 problem with `Connection: close`, after which the server closes the connection.
    The exception goes no further (it is logged here). One that comes after the response
    began is raised on: the server then drops the connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            if started:
                raise
            which = server_down(exc)
            if which is not None:
                log.warning("answered 503, the %s is unavailable: %r", which, exc)
                response = _respond(_down(which), {"Retry-After": str(RETRY_AFTER_S)})
            else:
                log.exception("unexpected error", exc_info=exc)
                response = _respond(_server_error(), {"Connection": "close"})
            await response(scope, receive, send)


def invalid(field: str, message: str) -> ApiError:
    return ApiError(
        422,
        "Unprocessable Content",
        f"{field}: {message}",
        errors=[FieldProblem(field=field, message=message)],
    )


_STATUS: dict[ErrorKind, int] = {
    "invalid": 422,
    "not_found": 404,
    "forbidden": 403,
    "conflict": 409,
    "exhausted": 429,
    "unavailable": 503,
    "internal": 500,
}
"""The status that answers each kind of the error tree (`cnbrain.domain.errors`)."""


def answer_of(exc: CnbrainError) -> JSONResponse:
    """The answer to an error of the tree: the status of its kind and its message. An invalid
    one names its field when it knows it; an exhausted or unavailable one says when to retry,
    and an unavailable one names the database or the cache when one of them is down; an
    internal one is logged and closes the connection, as `ErrorEdge` does for any bug."""
    if isinstance(exc, Invalid) and exc.field is not None:
        return _respond(invalid(exc.field, exc.message).problem)
    if exc.kind == "unavailable":
        which = server_down(exc)
        if which is not None:
            log.warning("answered 503, the %s is unavailable: %r", which, exc)
            return _respond(_down(which), {"Retry-After": str(RETRY_AFTER_S)})
        down = unavailable(str(exc))
        return _respond(down.problem, down.headers)
    if isinstance(exc, Exhausted):
        retry_after = str(max(1, round(exc.retry_after_s)))
        problem = Problem(title="Too Many Requests", status=429, detail=str(exc))
        return _respond(problem, {"Retry-After": retry_after})
    if exc.kind == "internal":
        log.exception("unexpected error", exc_info=exc)
        return _respond(_server_error(), {"Connection": "close"})
    status = _STATUS[exc.kind]
    return _respond(Problem(title=_title(status), status=status, detail=str(exc)))


def _respond(problem: Problem, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        problem.model_dump(exclude_none=True),
        status_code=problem.status,
        media_type=PROBLEM_JSON,
        headers=headers,
    )


def _field(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in {"body", "query", "path", "header"}:
        parts = parts[1:] or parts
    return ".".join(parts) or "(request)"


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def install(app: FastAPI) -> None:
    """Answer every error of `app` with a problem document."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _respond(exc.problem, exc.headers)

    @app.exception_handler(CnbrainError)
    async def cnbrain_error(_: Request, exc: CnbrainError) -> JSONResponse:
        return answer_of(exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            FieldProblem(field=_field(tuple(e["loc"])), message=e["msg"]) for e in exc.errors()
        ]
        detail = "; ".join(f"{e.field}: {e.message}" for e in errors)
        problem = Problem(title="Unprocessable Content", status=422, detail=detail, errors=errors)
        return _respond(problem)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        title = _title(exc.status_code)
        return _respond(
            Problem(title=title, status=exc.status_code, detail=str(exc.detail)),
            dict(exc.headers) if exc.headers else None,
        )

    app.add_middleware(ErrorEdge)
