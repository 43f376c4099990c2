"""The status code a served call ends with, as the server interceptors (request ids and
logs, metrics, tracing) all read it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:
    _Context = grpc.aio.ServicerContext[Any, Any]


def status_of(context: _Context, exc: BaseException | None) -> grpc.StatusCode:
    """The code of a call whose handler ended with `exc` (None: it returned): the code set
    on `context` when it returned (OK when none was) or was aborted (UNKNOWN when none was),
    CANCELLED when it was cancelled, UNKNOWN for another error."""
    if exc is None or isinstance(exc, grpc.aio.AbortError):
        code = context.code()
        if isinstance(code, grpc.StatusCode):
            return code
        return grpc.StatusCode.OK if exc is None else grpc.StatusCode.UNKNOWN
    if isinstance(exc, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN
