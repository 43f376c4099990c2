"""Limits every call meets before its route: the size of its body, and no control characters
in its path parameters and query string."""

import json
from collections.abc import Iterator

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cnbrain.domain.bounds import has_control_characters
from cnbrain.regional.problems import PROBLEM_JSON, invalid


class BodyLimit:
    """An ASGI middleware that answers 413 (a problem document) to a body larger than
    `max_bytes`, before the application reads any of it.

    A body with a Content-Length is judged by it (the server delivers no more than it
    declares); a body without one (chunked) is read and counted as it arrives, up to
    `max_bytes`, then handed on whole.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None:
            if declared > self.max_bytes:
                await self._refuse(send)
            else:
                await self.app(scope, receive, send)
            return
        messages = await self._read(receive)
        if messages is None:
            await self._refuse(send)
            return
        await self.app(scope, _replay(iter(messages), receive), send)

    async def _read(self, receive: Receive) -> list[Message] | None:
        """The messages of the whole body, or None once it is larger than the limit."""
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                return None
            if not message.get("more_body", False):
                return messages

    async def _refuse(self, send: Send) -> None:
        message = f"must be at most {self.max_bytes} bytes (the brain's max_body_bytes)"
        problem = {
            "type": "about:blank",
            "title": "Content Too Large",
            "status": 413,
            "detail": f"body: {message}",
            "errors": [{"field": "body", "message": message}],
        }
        content = json.dumps(problem).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", PROBLEM_JSON.encode()),
                    (b"content-length", str(len(content)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": content})


def _content_length(scope: Scope) -> int | None:
    """The declared Content-Length, or None when there is none (or it is not a number)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def _replay(messages: Iterator[Message], receive: Receive) -> Receive:
    """A receive that hands out `messages` first, then asks `receive`."""

    async def replayed() -> Message:
        message = next(messages, None)
        return message if message is not None else await receive()

    return replayed


async def refuse_control_characters(request: Request) -> None:
    """A dependency of every route: 422 naming the path or query parameter that holds a
    control character (a NUL byte, say), which no id, name or cursor may hold."""
    for name, value in request.path_params.items():
        if isinstance(value, str) and has_control_characters(value):
            raise invalid(name, "must not contain control characters")
    for name, value in request.query_params.multi_items():
        if has_control_characters(name) or has_control_characters(value):
            raise invalid(name, "must not contain control characters")
