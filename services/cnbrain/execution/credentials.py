"""Where a backend's secret comes from: the brain's credential store, and the token sources.

A `TokenSource` is a plain callable returning the current token. A source reads its file again
when the file changed, so a token renewed on disk is used from the next request on, and never
appears in configuration.

The `CredentialStore` is the only way a site's backend gets a token: the deployment names
each credential in the brain's settings, with the URL it may be sent to and the file it is
in; a site names the credential (`BackendRef.credential`), never a path or a variable.
"""

import base64
import binascii
import json
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, StringConstraints, model_validator

from cnbrain.domain.backend_ref import CREDENTIAL_NAME
from cnbrain.domain.errors import Invalid
from cnbrain.execution.errors import BackendUnavailable

TokenSource = Callable[[], str]

CredentialName = Annotated[str, StringConstraints(pattern=CREDENTIAL_NAME)]
"""The name of a credential in a brain's store (1 to 64 letters, digits, `.`, `_`, `-`)."""


class Credential(BaseModel):
    """One credential of the store: the URL it is for, and the file its token is in.

    The token is sent only to `url` and below: a backend's URL must have the same scheme,
    host and port, and a path that is `url`'s path or under it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: HttpUrl
    token_file: Path = Field(description="An absolute path, read by the brain only.")

    @model_validator(mode="after")
    def _checked(self) -> Self:
        if not self.token_file.is_absolute():
            raise ValueError(f"token_file must be an absolute path, got {self.token_file}")
        if self.url.username or self.url.password or self.url.query or self.url.fragment:
            raise ValueError("a credential's url takes no user, password, query or fragment")
        return self


class CredentialRefusedError(Invalid):
    """A backend may not use a credential; `field` is the `BackendRef` field at fault
    (`credential` or `url`), `message` says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class CredentialStore:
    """The credentials a brain's deployment configured (name -> `Credential`).

    `check` says whether a backend at a URL may use a credential; `token_source` gives the
    source a backend reads its token from, which checks the same at every call, so a token
    is never read for, nor sent to, a URL its credential is not for.
    """

    def __init__(self, credentials: Mapping[str, Credential] | None = None) -> None:
        self._credentials = dict(credentials or {})
        self._files = {name: token_from_file(c.token_file) for name, c in self._credentials.items()}

    def check(self, name: str, url: str) -> None:
        """Raise `CredentialRefusedError` unless the store has `name` and it is for `url`."""
        credential = self._credentials.get(name)
        if credential is None:
            known = ", ".join(sorted(self._credentials)) or "none"
            raise CredentialRefusedError(
                "credential",
                f"no credential {name!r} in this brain's credential store (it has: {known})",
            )
        if not url_within(url, credential.url):
            raise CredentialRefusedError(
                "url",
                f"the credential {name!r} is only for {credential.url} and below, not {url}",
            )

    def token_source(self, name: str, url: str) -> TokenSource:
        """A source of the token of `name` for a backend at `url`. Each call raises
        `BackendUnavailable` when the store refuses (see `check`), before reading anything."""

        def read() -> str:
            try:
                self.check(name, url)
            except CredentialRefusedError as refused:
                raise BackendUnavailable(f"{url}: {refused.message}") from None
            return self._files[name]()

        return read


def url_within(url: str, base: HttpUrl) -> bool:
    """Whether `url` is `base` or under it: the same scheme, host and port (the scheme's
    default when none is given), a path equal to `base`'s or below it, and no user, password,
    query or fragment."""
    try:
        candidate = HttpUrl(url)
    except ValueError:
        return False
    if candidate.username or candidate.password or candidate.query or candidate.fragment:
        return False
    if (candidate.scheme, candidate.host, candidate.port) != (base.scheme, base.host, base.port):
        return False
    prefix = (base.path or "/").rstrip("/")
    path = (candidate.path or "/").rstrip("/")
    return path == prefix or path.startswith(prefix + "/")


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
