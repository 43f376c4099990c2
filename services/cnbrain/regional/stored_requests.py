"""Reading back the requests a brain stored: rows written by an earlier version may hold
numbers outside today's bounds, and must not stop whoever reads them."""

from typing import Any

from pydantic import ValidationError

from cnbrain.domain.request import PlacementRequest


def stored_request(body: Any) -> tuple[PlacementRequest | None, str]:
    """The request a stored body holds, or None and why it is not a valid request (rows
    stored by an earlier version may hold numbers outside today's bounds)."""
    try:
        return PlacementRequest.model_validate(body), ""
    except ValidationError as exc:
        return None, _first_problem(exc)


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    field = ".".join(str(p) for p in error["loc"]) or "(request)"
    return f"{field}: {error['msg']}"
