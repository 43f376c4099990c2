"""Every call of the REST API has a request id, which its answer names (`x-request-id`).

The id is the caller's own `x-request-id` when it sends a usable one
(`cnbrain.rpc.context.is_valid_request_id`), so that a call can be followed from the caller's
logs into the brain's; otherwise the brain makes one (32 hexadecimal digits). The call is
handled with it current (`request_id_scope`): the gRPC calls it makes to other brains carry
it, and log records name it. The call starts with no tenant (`tenant_scope`) until its
authentication names one. Any answer carries it, errors included, those of the
middleware inside this one and the 500 of an unexpected error.
"""

from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cnbrain.rpc.context import (
    REQUEST_ID_HEADER,
    is_valid_request_id,
    new_request_id,
    request_id_scope,
)
from cnbrain.telemetry.tenant import tenant_scope

HEADER: Final = REQUEST_ID_HEADER.encode()


def request_id_of(scope: Scope) -> str:
    """The id of the call `scope` (module docstring)."""
    for name, value in scope.get("headers", ()):
        if name == HEADER:
            given: str = value.decode("latin-1")
            if is_valid_request_id(given):
                return given
    return new_request_id()


class RequestIds:
    """An ASGI middleware that handles each call with its request id current and puts the
    id on the answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)
        named_by = (HEADER, request_id.encode())

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", ()) if h[0].lower() != HEADER]
                message = {**message, "headers": [*headers, named_by]}
            await send(message)

        with request_id_scope(request_id), tenant_scope():
            await self.app(scope, receive, named)
