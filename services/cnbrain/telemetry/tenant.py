"""The tenant of the call being handled, for the logs (and, when tracing is on, its span).

The REST edge opens a `tenant_scope` around each call (none yet); authentication then names
the tenant of the caller's key with `note_tenant`, and so does the brain that answers a call
another region forwarded, once it checked the caller. Outside a call there is none.
"""

from contextlib import AbstractContextManager
from contextvars import ContextVar, Token

from cnbrain.telemetry.spans import set_attribute

TENANT_ATTRIBUTE = "cnbrain.tenant"
"""The attribute of a call's span that names its tenant."""

_tenant: ContextVar[str | None] = ContextVar("cnbrain_tenant", default=None)


def current_tenant() -> str | None:
    """The tenant of the call being handled in this context, or None."""
    return _tenant.get()


def note_tenant(tenant_id: str | None) -> None:
    """`tenant_id` is the tenant of the call being handled (None: a caller of no tenant),
    until the end of the call's context; the current span gets it as `cnbrain.tenant`."""
    _tenant.set(tenant_id)
    if tenant_id is not None:
        set_attribute(TENANT_ATTRIBUTE, tenant_id)


class _TenantScope:
    """A class rather than a generator: it runs on every REST call."""

    __slots__ = ("_token",)
    _token: Token[str | None]

    def __enter__(self) -> None:
        self._token = _tenant.set(None)

    def __exit__(self, *_: object) -> None:
        _tenant.reset(self._token)


def tenant_scope() -> AbstractContextManager[None]:
    """No tenant inside the block until `note_tenant` names one; the previous one after it."""
    return _TenantScope()
