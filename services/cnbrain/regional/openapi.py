"""The regional brain's OpenAPI document: typed request bodies and problem details everywhere.

FastAPI generates the document from the routes; `install` completes it once, on first use:

- Every error answer (4xx, 5xx) is declared as `application/problem+json` with the `Problem`
  schema, the media type `problems` answers with.
- Statuses that every operation of a kind can return are declared on each of them: 401 where an
  API key is needed, 400, 413 and 422 where there is a body, 422 where there are parameters, 503
  (database or cache unavailable) everywhere but liveness.
- A route that reads its body as a raw object (to parse it once, itself) names the model that
  body must be in `BODY_MODEL`; its schema becomes the declared request body.
- Each operation shows, as the `example` of its JSON request body and of each JSON answer of
  a success status, what a real brain was sent and answered (`api_examples.json`, recorded
  by `scripts/record_api_examples.py`; its lists cut to a few items).
"""

import json
from functools import cache
from importlib import resources
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from cnbrain.domain.request import PlacementRequest
from cnbrain.regional.problems import PROBLEM_JSON, Problem

BODY_MODEL = "x-cnbrain-body"
"""OpenAPI extension a route sets (in `openapi_extra`) to the name of a `BODY_MODELS` entry."""

REF = "#/components/schemas/{model}"


def _submitted_request_schema() -> dict[str, Any]:
    """A placement request as a caller sends it: the brain gives it its id."""
    schema = PlacementRequest.model_json_schema(ref_template=REF)
    schema["properties"].pop("id", None)
    schema["title"] = "SubmittedRequest"
    schema["description"] = (
        "A placement request (docs/placement.md). `tenant` is the caller's own for tenant roles "
        "and required for staff; the brain assigns the id."
    )
    return schema


BODY_MODELS = {"SubmittedRequest": _submitted_request_schema}

_COMMON = {
    400: "The body cannot be read: not JSON in UTF-8.",
    401: "No valid API key.",
    413: "The body is larger than the brain accepts.",
    422: "Malformed; `errors` names the fields and the bounds.",
    503: "The database or the cache is unavailable; retry after Retry-After.",
}
_LIVENESS = "/healthz"


def install(app: FastAPI) -> None:
    """Make `app.openapi()` return the completed document (built once)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = complete(
                get_openapi(
                    title=app.title,
                    version=app.version,
                    description=app.description,
                    routes=app.routes,
                )
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override


def complete(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with typed bodies and problem details declared (see the module docstring)."""
    schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    _add_model(schemas, Problem)
    for path, operations in document.get("paths", {}).items():
        for operation in operations.values():
            _type_body(operation, schemas)
            _declare_common(path, operation)
            _problem_media_type(operation)
    _add_examples(document)
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    return document


def _add_model(schemas: dict[str, Any], model: type[BaseModel]) -> None:
    schema = model.model_json_schema(ref_template=REF)
    schemas.update(schema.pop("$defs", {}))
    schemas[model.__name__] = schema


def _type_body(operation: dict[str, Any], schemas: dict[str, Any]) -> None:
    name = operation.pop(BODY_MODEL, None)
    if name is None:
        return
    schema = BODY_MODELS[name]()
    schemas.update(schema.pop("$defs", {}))
    schemas[name] = schema
    body = operation.setdefault("requestBody", {"required": True})
    media = body.setdefault("content", {}).setdefault("application/json", {})
    media["schema"] = {"$ref": REF.format(model=name)}


def _declare_common(path: str, operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    wanted: list[int] = []
    if operation.get("security"):
        wanted.append(401)
    if "requestBody" in operation:
        wanted += [400, 413, 422]
    if operation.get("parameters"):
        wanted.append(422)
    if path != _LIVENESS:
        wanted.append(503)
    for status in wanted:
        responses.setdefault(str(status), {"description": _COMMON[status]})
    if "422" in responses and responses["422"].get("description") == "Validation Error":
        responses["422"]["description"] = _COMMON[422]


def _problem_media_type(operation: dict[str, Any]) -> None:
    problem = {PROBLEM_JSON: {"schema": {"$ref": REF.format(model="Problem")}}}
    for status, response in operation.get("responses", {}).items():
        if status[0] in "45":
            response["content"] = problem


@cache
def recorded_examples() -> dict[str, Any]:
    """Per operation (`METHOD /path/template`), the body a real brain was sent (`request`)
    and, by status, what it answered (`responses`)."""
    text = resources.files("cnbrain.regional").joinpath("api_examples.json").read_text()
    examples: dict[str, Any] = json.loads(text)
    return examples


def _add_examples(document: dict[str, Any]) -> None:
    examples = recorded_examples()
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            recorded = examples.get(f"{method.upper()} {path}")
            if recorded is None:
                continue
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None and "request" in recorded and "examples" not in body:
                body["example"] = recorded["request"]
            for status, answer in recorded["responses"].items():
                response = operation.get("responses", {}).get(status, {})
                media = response.get("content", {}).get("application/json")
                if media is not None:
                    media["example"] = answer
