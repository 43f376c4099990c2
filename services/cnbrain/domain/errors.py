"""The one tree of errors the brains raise on purpose.

Every such error derives from `CnbrainError` and has a `kind`, which is all an edge needs to
answer it: the REST edge (`regional/problems.py`) turns a kind into a problem+json status, the
gRPC edge (`rpc/interceptors.py`) into a status code. Code below the edges raises these and
never a transport's error; `str(error)` says what was wrong and where.

| kind          | REST | gRPC                 | meaning                                          |
|---------------|------|----------------------|--------------------------------------------------|
| `invalid`     | 422  | INVALID_ARGUMENT     | the caller sent something wrong; it never fits   |
| `not_found`   | 404  | NOT_FOUND            | what the caller named does not exist             |
| `forbidden`   | 403  | PERMISSION_DENIED    | the caller may not do this                       |
| `conflict`    | 409  | FAILED_PRECONDITION  | the state does not allow it now                  |
| `exhausted`   | 429  | RESOURCE_EXHAUSTED   | the caller's rate is spent; retry after a while  |
| `unavailable` | 503  | UNAVAILABLE          | a server it needs does not answer; retry later   |
| `internal`    | 500  | INTERNAL             | a bug                                            |
"""

from typing import ClassVar, Literal

ErrorKind = Literal[
    "invalid", "not_found", "forbidden", "conflict", "exhausted", "unavailable", "internal"
]


class CnbrainError(Exception):
    """Root of the tree: an error raised on purpose, answered by its `kind`."""

    kind: ClassVar[ErrorKind] = "internal"


class Invalid(CnbrainError, ValueError):
    """What the caller sent is wrong. `field`, when known, is the dotted path at fault."""

    kind: ClassVar[ErrorKind] = "invalid"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


class NotFound(CnbrainError, LookupError):
    """What the caller named does not exist, or is not visible to it."""

    kind: ClassVar[ErrorKind] = "not_found"


class Forbidden(CnbrainError):
    """The caller is who it says, but may not do this (its role or its tenant)."""

    kind: ClassVar[ErrorKind] = "forbidden"


class Conflict(CnbrainError):
    """The current state does not allow the change (no room, a state that cannot follow)."""

    kind: ClassVar[ErrorKind] = "conflict"


class Exhausted(CnbrainError):
    """The caller has spent its rate; `retry_after_s` says when it may try again."""

    kind: ClassVar[ErrorKind] = "exhausted"

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unavailable(CnbrainError):
    """A server this brain needs does not answer; nothing is known to have changed there."""

    kind: ClassVar[ErrorKind] = "unavailable"


class Internal(CnbrainError):
    """A step failed in a way no caller can mend: a bug, or a broken invariant."""

    kind: ClassVar[ErrorKind] = "internal"
