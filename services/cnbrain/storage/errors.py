"""Errors of the storage layer, in the tree of `cnbrain.domain.errors`; each message names
the item at fault. Their kinds: NotFoundError (and UnknownItem) not found; RegistryError,
TenantError and BadCursor invalid; LastAdmin, TenancyConflict, CapacityConflict,
QuotaExceeded (and its CohortQuotaExceeded), RequestStoreError and InvalidTransition conflict.
"""

from collections.abc import Mapping
from typing import ClassVar

from cnbrain.domain.errors import CnbrainError, Conflict, ErrorKind, Invalid, NotFound


class StorageError(CnbrainError):
    """Base class of every error raised on purpose by `cnbrain.storage`."""


class NotFoundError(StorageError, NotFound):
    """The tenant, user, key, request or reservation does not exist (or is not visible)."""


class RegistryError(StorageError, Invalid):
    """A site or link is unknown, exists already, holds reservations, or the change would
    leave the map invalid (the MapError message is included)."""


class UnknownItem(RegistryError, NotFoundError):  # noqa: N818 (the name the API uses)
    """The site or link is not registered (or is retired)."""

    kind: ClassVar[ErrorKind] = "not_found"


class TenantError(StorageError, Invalid):
    """A tenant, user, role or quota value is not acceptable."""


class LastAdmin(StorageError, Conflict):  # noqa: N818 (the name the API uses)
    """The user is the last active admin: disabling it would leave nobody to administer."""


class TenancyConflict(StorageError, Conflict):  # noqa: N818
    """The tenant, user or API key exists already, or the user is disabled."""


class BadCursor(StorageError, Invalid):  # noqa: N818
    """A pagination cursor was not produced by this store (or was altered)."""


class LedgerStoreError(StorageError, Conflict):
    """A reservation cannot be taken or released for a reason other than lack of room."""


class CapacityConflict(LedgerStoreError):  # noqa: N818
    """A site's or link's free capacity is too small now; `resource` names it, for example
    "site 'BJ-hub' cpu" or "link 'a--b' bandwidth". Retry on a fresh snapshot."""

    def __init__(self, resource: str, detail: str = "") -> None:
        self.resource = resource
        super().__init__(f"{resource}: {detail}" if detail else f"{resource}: not enough room")


class QuotaExceeded(LedgerStoreError):  # noqa: N818
    """The tenant's quota would be exceeded; `resource` names the limit, for example
    "tenant 'acme' cpu"."""

    def __init__(self, resource: str, detail: str = "") -> None:
        self.resource = resource
        super().__init__(f"{resource}: {detail}" if detail else f"{resource}: quota exceeded")

    @property
    def refusal(self) -> str:
        """The reason of a request refused for it, as its tenant reads it."""
        return f"the tenant's quota of {self.resource} would be exceeded"


class CohortQuotaExceeded(QuotaExceeded):
    """Tenants would hold more than their cohorts allow now. `refusals` gives, by request id,
    the reason of each claim refused (`refusal_of`); `cohort` and `reason` are the first's:
    the cohort, and which dimension, how much and which limit (the tenant's borrowing limit,
    or what the other members leave unused)."""

    def __init__(self, cohort: str, reason: str, refusals: Mapping[str, str]) -> None:
        self.cohort = cohort
        self.reason = reason
        self.refusals = dict(refusals)
        super().__init__(f"cohort {cohort!r}", reason)

    @staticmethod
    def refusal_of(cohort: str, reason: str) -> str:
        """The reason of a request its `cohort` refuses for `reason`."""
        return f"the quota of cohort {cohort!r} would be exceeded: {reason}"

    @property
    def refusal(self) -> str:
        return self.refusal_of(self.cohort, self.reason)


class RequestStoreError(StorageError, Conflict):
    """A request cannot be stored or changed."""


class InvalidTransition(RequestStoreError, ValueError):  # noqa: N818
    """A request cannot go from `current` to `target`."""

    def __init__(self, request_id: str, current: str, target: str) -> None:
        self.request_id = request_id
        self.current = current
        self.target = target
        super().__init__(f"request {request_id!r}: cannot go from {current!r} to {target!r}")
