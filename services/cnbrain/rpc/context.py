"""The request id of the call being handled, shared by the server and client interceptors.

A server interceptor sets it for the duration of each handler (from the caller's
`x-request-id`, or a new one); the client interceptors send it on every outgoing call made
inside that handler, so one id follows a request across brains. Outside a handler there is
none, and each outgoing call gets a new one.
"""

import contextlib
import logging
import uuid
from collections.abc import Iterator
from contextvars import ContextVar

REQUEST_ID_HEADER = "x-request-id"
"""Metadata key carrying the request id (lower case, as gRPC metadata keys must be)."""

MAX_REQUEST_ID_LENGTH = 128
"""Longer incoming ids are replaced by new ones."""

_request_id: ContextVar[str | None] = ContextVar("cnbrain_rpc_request_id", default=None)


def new_request_id() -> str:
    """A fresh id: 32 lower-case hex digits."""
    return uuid.uuid4().hex


def current_request_id() -> str | None:
    """The id of the call being handled in this context, or None outside a handler."""
    return _request_id.get()


def is_valid_request_id(value: str) -> bool:
    """True for 1..MAX_REQUEST_ID_LENGTH printable ASCII characters without spaces."""
    return 0 < len(value) <= MAX_REQUEST_ID_LENGTH and all(33 <= ord(c) <= 126 for c in value)


@contextlib.contextmanager
def request_id_scope(request_id: str) -> Iterator[str]:
    """Make `request_id` current inside the block (restoring the previous one after it)."""
    token = _request_id.set(request_id)
    try:
        yield request_id
    finally:
        _request_id.reset(token)


class RequestIdLogFilter(logging.Filter):
    """Adds `request_id` (the current one, or "-") to every record, for log formats that
    print `%(request_id)s`. Attach it to a handler; it never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id() or "-"
        return True
