"""Errors as problem details (RFC 9457): every error names what was wrong and where."""

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from cnbrain.placement.errors import RequestError
from cnbrain.storage import errors

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger("cnbrain.regional")


class FieldProblem(BaseModel):
    field: str
    message: str


class Problem(BaseModel):
    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[FieldProblem] | None = None


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
    ) -> None:
        super().__init__(detail)
        self.problem = Problem(title=title, status=status, detail=detail, errors=errors)
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


def unavailable(detail: str) -> ApiError:
    return ApiError(503, "Service Unavailable", detail, headers={"Retry-After": "5"})


def invalid(field: str, message: str) -> ApiError:
    return ApiError(
        422,
        "Unprocessable Content",
        f"{field}: {message}",
        errors=[FieldProblem(field=field, message=message)],
    )


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

    @app.exception_handler(RequestError)
    async def request_error(_: Request, exc: RequestError) -> JSONResponse:
        return _respond(invalid(exc.field, exc.message).problem)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            FieldProblem(field=_field(tuple(e["loc"])), message=e["msg"]) for e in exc.errors()
        ]
        detail = "; ".join(f"{e.field}: {e.message}" for e in errors)
        problem = Problem(title="Unprocessable Content", status=422, detail=detail, errors=errors)
        return _respond(problem)

    @app.exception_handler(errors.NotFoundError)
    async def storage_not_found(_: Request, exc: errors.NotFoundError) -> JSONResponse:
        return _respond(Problem(title="Not Found", status=404, detail=str(exc)))

    @app.exception_handler(errors.StorageError)
    async def storage_error(_: Request, exc: errors.StorageError) -> JSONResponse:
        if isinstance(exc, errors.RegistryError | errors.TenantError | errors.BadCursor):
            return _respond(Problem(title="Unprocessable Content", status=422, detail=str(exc)))
        return _respond(Problem(title="Conflict", status=409, detail=str(exc)))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        title = _title(exc.status_code)
        return _respond(
            Problem(title=title, status=exc.status_code, detail=str(exc.detail)),
            dict(exc.headers) if exc.headers else None,
        )

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error", exc_info=exc)
        return _respond(
            Problem(
                title="Internal Server Error",
                status=500,
                detail="unexpected error; see the brain's log",
            )
        )
