"""Where a backend's secret comes from: a file or an environment variable, read when needed.

A `TokenSource` is a plain callable returning the current token. Sources read the secret at
each call (a file only when it changed), so a token renewed on disk or in the environment is
used from the next request on, and never appears in configuration.
"""

import base64
import binascii
import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from cnbrain.execution.errors import BackendUnavailable

TokenSource = Callable[[], str]


def token_from_file(path: str | Path) -> TokenSource:
    """A source reading the token from `path` (surrounding whitespace stripped).

    The file is read again only when its modification time or size changes. Raises
    `BackendUnavailable` when it cannot be read, is empty, or holds a JWT whose `exp` passed.
    """
    return _FileToken(Path(path))


class _FileToken:
    def __init__(self, file: Path) -> None:
        self._file = file
        self._seen: tuple[int, int] | None = None
        self._token = ""

    def __call__(self) -> str:
        try:
            stat = self._file.stat()
            seen = (stat.st_mtime_ns, stat.st_size)
            if seen != self._seen:
                self._token = self._file.read_text(encoding="utf-8").strip()
                self._seen = seen
        except OSError as exc:
            raise BackendUnavailable(f"cannot read the token file {self._file}: {exc}") from exc
        return _checked(self._token, f"the token file {self._file}")


def token_from_env(name: str) -> TokenSource:
    """A source reading the token from the environment variable `name` at each call.

    Raises `BackendUnavailable` when it is unset, empty, or holds a JWT whose `exp` passed.
    """

    def read() -> str:
        token = os.environ.get(name, "").strip()
        return _checked(token, f"the environment variable {name}")

    return read


def _checked(token: str, where: str) -> str:
    if not token:
        raise BackendUnavailable(f"no token in {where}")
    expires = jwt_expiry(token)
    if expires is not None and expires <= time.time():
        when = datetime.fromtimestamp(expires, tz=UTC).isoformat(timespec="seconds")
        raise BackendUnavailable(f"the token in {where} expired at {when}; renew it")
    return token


def jwt_expiry(token: str) -> float | None:
    """The `exp` claim of a JWT (POSIX seconds), or None if `token` is not a JWT with one.

    The signature is not checked: the scheduler does that; this only lets a caller say
    "expired" instead of a vaguer refusal.
    """
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None
