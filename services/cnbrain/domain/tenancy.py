"""A change of the federation's tenancy: what the national brain records, with its version,
and every regional brain takes in that order (`docs/federation.md`, "One tenancy for the
federation").

A change names what it creates or changes by id; an API key travels as its id and the
SHA-256 of its secret, never the secret. Every field is bounded and checked, so a change
from a peer is refused whole (pydantic's ValidationError) when anything in it is off.
`at` is the national brain's time of the change: it sets it when it records the change.
"""

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    model_validator,
)

from cnbrain.domain import bounds

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
"""A tenant's, user's or region's id: 1 to 64 letters, digits, '_', '.' or '-', from a letter
or digit."""

TenancyId = Annotated[str, StringConstraints(pattern=ID_PATTERN)]

KeyId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{8,32}$")]
"""An API key's id (the `<id>` of `ck_<id>.<secret>`)."""

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
"""A SHA-256 digest in lowercase hex."""

DisplayName = Annotated[
    str, StringConstraints(min_length=1, max_length=200), AfterValidator(bounds.control_free)
]
"""A tenant's or user's name: 1 to 200 characters, no control characters."""

TenancyRole = Literal["tenant-user", "tenant-admin", "operator", "admin"]
STAFF = frozenset({"operator", "admin"})

MAX_VERSION = 2**62
"""The highest version a change may have."""


def _utc(value: datetime) -> datetime:
    """`value` in UTC; one without a zone is taken to be UTC already."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


When = Annotated[datetime, AfterValidator(_utc)]


class _Change(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    at: When | None = None


class TenantCreated(_Change):
    kind: Literal["tenant.created"] = "tenant.created"
    tenant_id: TenancyId
    name: DisplayName


class UserCreated(_Change):
    """A user; staff roles belong to no tenant, tenant roles to one."""

    kind: Literal["user.created"] = "user.created"
    user_id: TenancyId
    tenant_id: TenancyId | None
    name: DisplayName
    role: TenancyRole

    @model_validator(mode="after")
    def _tenant_fits_role(self) -> "UserCreated":
        if (self.role in STAFF) != (self.tenant_id is None):
            raise ValueError("staff roles belong to no tenant, tenant roles to one")
        return self


class UserDisabled(_Change):
    kind: Literal["user.disabled"] = "user.disabled"
    user_id: TenancyId


class ApiKeyCreated(_Change):
    kind: Literal["api_key.created"] = "api_key.created"
    key_id: KeyId
    user_id: TenancyId
    secret_sha256: Sha256


class ApiKeyRevoked(_Change):
    kind: Literal["api_key.revoked"] = "api_key.revoked"
    key_id: KeyId
    user_id: TenancyId


QuotaLevel = Literal["region", "national"]
"""Where a quota's limits hold: on what one region's ledger holds for the tenant, or on
what the whole federation holds for it, summed over the regions."""


class QuotaSet(_Change):
    """A tenant's limits in the engine's units, but accelerators whole (None: unlimited).

    At level "region", what a region holds the tenant to on its own ledger: `region` None
    sets them for every region, a region's id for that region alone (a later set for every
    region replaces it). At level "national", what the federation holds the tenant to,
    summed over every region (`region` is None)."""

    kind: Literal["quota.set"] = "quota.set"
    tenant_id: TenancyId
    level: QuotaLevel = "region"
    region: TenancyId | None = None
    limit_cpu_m: int | None = Field(default=None, ge=0, le=bounds.MAX_QUOTA_CPU_CORES * 1000)
    limit_mem_mib: int | None = Field(default=None, ge=0, le=bounds.MAX_QUOTA_MEMORY_GIB * 1024)
    limit_accelerators: int | None = Field(default=None, ge=0, le=bounds.MAX_QUOTA_ACCELERATORS)
    limit_mbps: int | None = Field(default=None, ge=0, le=bounds.MAX_QUOTA_BANDWIDTH_GBPS * 1000)
    limit_active_requests: int | None = Field(
        default=None, ge=0, le=bounds.MAX_QUOTA_ACTIVE_REQUESTS
    )

    @model_validator(mode="after")
    def _national_is_every_region(self) -> "QuotaSet":
        if self.level == "national" and self.region is not None:
            raise ValueError("a national quota names no region")
        return self

    def applies_to(self, region: str | None) -> bool:
        """Whether this region-level set holds in `region` (None: a standalone brain's)."""
        return self.level == "region" and (self.region is None or self.region == region)


TenancyChange = Annotated[
    TenantCreated | UserCreated | UserDisabled | ApiKeyCreated | ApiKeyRevoked | QuotaSet,
    Field(discriminator="kind"),
]

MAX_CHANGE_JSON = 4096
"""Characters of one change as JSON, at most (the largest, a quota, is under 400)."""

_ADAPTER: TypeAdapter[TenancyChange] = TypeAdapter(TenancyChange)


def change_of(text: str) -> TenancyChange:
    """The change in JSON `text`. Raises ValueError (pydantic's ValidationError) when it is
    too long, not a change, or any field is off."""
    if len(text) > MAX_CHANGE_JSON:
        raise ValueError(f"a tenancy change is at most {MAX_CHANGE_JSON} characters")
    return _ADAPTER.validate_json(text)


def change_json(change: TenancyChange) -> str:
    return change.model_dump_json()


def change_document(change: TenancyChange) -> dict[str, object]:
    """`change` as a JSON-ready dict (what the national brain's log keeps)."""
    return change.model_dump(mode="json")


def change_from_document(document: object) -> TenancyChange:
    """The change of a dict made by `change_document`."""
    return _ADAPTER.validate_python(document)


def subject_of(change: TenancyChange) -> tuple[str, str, str | None]:
    """What `change` is about, for an audit entry: (object type, object id, tenant id or
    None when the change does not name it)."""
    match change:
        case TenantCreated() | QuotaSet():
            return "tenant", change.tenant_id, change.tenant_id
        case UserCreated():
            return "user", change.user_id, change.tenant_id
        case UserDisabled():
            return "user", change.user_id, None
        case ApiKeyCreated() | ApiKeyRevoked():
            return "api_key", f"ck_{change.key_id}", None
