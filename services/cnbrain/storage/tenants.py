"""Tenants, users with roles, API keys and quotas.

API keys are bearer tokens `ck_<id>.<secret>`: `<id>` finds the row, only the SHA-256 of
`<secret>` is stored, and the secret is compared in constant time. A full token is returned
once, by `create_api_key`, and can never be read back.

A disabled user keeps its rows and keys, but none of its keys authenticates any more; the
last active admin cannot be disabled (`LastAdmin`), so a brain always has one.

Every tenant has one quota row (created with it, all limits None: unlimited); the ledger
(`cnbrain.storage.ledger_store`) counts held reservations into it.
"""

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.netmap.arrays import accelerators_to_milli
from cnbrain.storage._sql import fetch_scalar
from cnbrain.storage.clock import as_utc, utcnow
from cnbrain.storage.errors import LastAdmin, NotFoundError, TenantError
from cnbrain.storage.models import ApiKey as ApiKeyRow
from cnbrain.storage.models import Quota, Tenant
from cnbrain.storage.models import User as UserRow

__all__ = [
    "PLATFORM_ROLES",
    "ROLES",
    "TENANT_ROLES",
    "ApiKey",
    "LastAdmin",
    "NotFoundError",
    "TenantError",
    "User",
    "api_key_id",
    "authenticate",
    "create_api_key",
    "create_tenant",
    "create_user",
    "disable_user",
    "get_quota",
    "get_tenant",
    "get_user",
    "has_users",
    "install_api_key",
    "limited_tenants",
    "limits_of",
    "list_api_keys",
    "list_tenants",
    "list_users",
    "new_api_key",
    "new_user_id",
    "quota_used",
    "revoke_api_key",
    "set_quota",
    "used_of",
]

TENANT_ROLES = frozenset({"tenant-user", "tenant-admin"})
"""Roles that belong to one tenant."""
PLATFORM_ROLES = frozenset({"operator", "admin"})
"""Roles that belong to no tenant."""
ROLES = TENANT_ROLES | PLATFORM_ROLES
TOKEN_PREFIX = "ck_"

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_KEY_ID = re.compile(r"^[A-Za-z0-9_-]{8,32}$")
_MIN_SECRET = 32
_DUMMY_DIGEST = hashlib.sha256(b"no such key").hexdigest()


@dataclass(frozen=True, slots=True)
class User:
    """A person or robot with `role`; operators and admins have no `tenant_id`. A disabled
    user (`disabled_at` set) keeps its rows, but none of its keys authenticates."""

    id: str
    tenant_id: str | None
    name: str
    role: str
    created_at: datetime
    disabled_at: datetime | None


@dataclass(frozen=True, slots=True)
class ApiKey:
    """An API key of `user_id` (its secret is never kept; see the module docstring)."""

    id: str
    user_id: str
    created_at: datetime
    revoked_at: datetime | None


def _user(record: UserRow) -> User:
    return User(
        id=record.id,
        tenant_id=record.tenant_id,
        name=record.name,
        role=record.role,
        created_at=as_utc(record.created_at),
        disabled_at=None if record.disabled_at is None else as_utc(record.disabled_at),
    )


def _key(record: ApiKeyRow) -> ApiKey:
    return ApiKey(
        id=record.id,
        user_id=record.user_id,
        created_at=as_utc(record.created_at),
        revoked_at=None if record.revoked_at is None else as_utc(record.revoked_at),
    )


async def create_tenant(
    session: AsyncSession, *, name: str, tenant_id: str | None = None
) -> Tenant:
    """A new tenant (id generated when not given) with an unlimited quota row.

    Raises TenantError if the id is malformed or taken.
    """
    tenant_id = tenant_id or f"t-{secrets.token_hex(6)}"
    _check_id("tenant", tenant_id)
    if not name.strip():
        raise TenantError("tenant name must not be empty")
    if await session.get(Tenant, tenant_id) is not None:
        raise TenantError(f"tenant {tenant_id!r} exists already")
    tenant = Tenant(id=tenant_id, name=name, created_at=utcnow())
    session.add(tenant)
    await session.flush()
    session.add(_unlimited(tenant_id))
    await session.flush()
    return tenant


async def get_tenant(session: AsyncSession, *, tenant_id: str) -> Tenant | None:
    return await session.get(Tenant, tenant_id)


async def list_tenants(session: AsyncSession) -> list[Tenant]:
    """Every tenant, by id."""
    return list(await session.scalars(select(Tenant).order_by(Tenant.id)))


async def create_user(
    session: AsyncSession,
    *,
    name: str,
    role: str,
    tenant_id: str | None = None,
    user_id: str | None = None,
) -> User:
    """A new user. Tenant roles (tenant-user, tenant-admin) need an existing `tenant_id`;
    platform roles (operator, admin) must have none. Raises TenantError otherwise, and
    NotFoundError for an unknown tenant."""
    if role not in ROLES:
        raise TenantError(f"role {role!r} is not one of {', '.join(sorted(ROLES))}")
    if role in TENANT_ROLES and tenant_id is None:
        raise TenantError(f"role {role!r} needs a tenant")
    if role in PLATFORM_ROLES and tenant_id is not None:
        raise TenantError(f"role {role!r} belongs to no tenant; got tenant {tenant_id!r}")
    if tenant_id is not None and await session.get(Tenant, tenant_id) is None:
        raise NotFoundError(f"tenant {tenant_id!r} does not exist")
    user_id = user_id or new_user_id()
    _check_id("user", user_id)
    if await session.get(UserRow, user_id) is not None:
        raise TenantError(f"user {user_id!r} exists already")
    user = UserRow(id=user_id, tenant_id=tenant_id, name=name, role=role, created_at=utcnow())
    session.add(user)
    await session.flush()
    return _user(user)


async def get_user(session: AsyncSession, *, user_id: str) -> User | None:
    record = await session.get(UserRow, user_id)
    return None if record is None else _user(record)


async def has_users(session: AsyncSession) -> bool:
    """True once any user exists (the first start installs an admin when there is none)."""
    return await fetch_scalar(session, select(UserRow.id).limit(1)) is not None


async def list_users(session: AsyncSession, *, tenant_id: str | None = None) -> list[User]:
    """Users of one tenant, or every user when `tenant_id` is None; by id."""
    query = select(UserRow).order_by(UserRow.id)
    if tenant_id is not None:
        query = query.where(UserRow.tenant_id == tenant_id)
    return [_user(record) for record in await session.scalars(query)]


async def create_api_key(session: AsyncSession, *, user_id: str, token: str | None = None) -> str:
    """A new key for the user; returns the full bearer token (the only time it is visible).

    `token` installs a token chosen elsewhere (say, an admin token from the settings) instead
    of a new random one; it must look like `ck_<id>.<secret>` with an id of 8-32 letters,
    digits, '_' or '-' and a secret of 32+ characters (TenantError otherwise).
    """
    if await session.get(UserRow, user_id) is None:
        raise NotFoundError(f"user {user_id!r} does not exist")
    if token is None:
        key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    else:
        parsed = _parse(token)
        if parsed is None or len(parsed[1]) < _MIN_SECRET:
            raise TenantError(
                "an API key must look like ck_<id of 8-32 characters>.<secret of 32+ characters>"
            )
        key_id, secret = parsed
        if await session.get(ApiKeyRow, key_id) is not None:
            raise TenantError(f"API key {key_id!r} exists already")
    session.add(
        ApiKeyRow(id=key_id, user_id=user_id, secret_sha256=_digest(secret), created_at=utcnow())
    )
    await session.flush()
    return f"{TOKEN_PREFIX}{key_id}.{secret}"


def new_user_id() -> str:
    """A new random user id, as `create_user` makes one when given none."""
    return f"u-{secrets.token_hex(6)}"


def new_api_key() -> tuple[str, str, str]:
    """A new random key: (its id, its full bearer token, the SHA-256 of its secret), for a
    key to be installed elsewhere by its hash (`install_api_key`)."""
    key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    return key_id, f"{TOKEN_PREFIX}{key_id}.{secret}", _digest(secret)


async def install_api_key(
    session: AsyncSession, *, key_id: str, user_id: str, secret_sha256: str, created_at: datetime
) -> None:
    """Store a key of the user by its id and the SHA-256 of its secret (the secret itself
    stays with whoever made it). Raises NotFoundError (no such user) or TenantError (the id
    is malformed or taken)."""
    if not _KEY_ID.match(key_id):
        raise TenantError(f"API key id {key_id!r} must be 8-32 letters, digits, '_' or '-'")
    if await session.get(UserRow, user_id) is None:
        raise NotFoundError(f"user {user_id!r} does not exist")
    if await session.get(ApiKeyRow, key_id) is not None:
        raise TenantError(f"API key {key_id!r} exists already")
    session.add(
        ApiKeyRow(id=key_id, user_id=user_id, secret_sha256=secret_sha256, created_at=created_at)
    )
    await session.flush()


def api_key_id(token: str) -> str | None:
    """The key id of a well-formed token, else None (no database access)."""
    parsed = _parse(token)
    return parsed[0] if parsed else None


async def authenticate(session: AsyncSession, *, token: str) -> tuple[User, ApiKey] | None:
    """The user and key of a valid, unrevoked token of an active user; None for anything
    else."""
    parsed = _parse(token)
    if parsed is None:
        return None
    key_id, secret = parsed
    row = (
        await session.execute(
            select(ApiKeyRow, UserRow)
            .join(UserRow, UserRow.id == ApiKeyRow.user_id)
            .where(ApiKeyRow.id == key_id)
        )
    ).first()
    stored = row[0].secret_sha256 if row else _DUMMY_DIGEST
    matches = hmac.compare_digest(_digest(secret), stored)
    if row is None or not matches or row[0].revoked_at is not None:
        return None
    if row[1].disabled_at is not None:
        return None
    return _user(row[1]), _key(row[0])


async def revoke_api_key(
    session: AsyncSession, *, key_id: str, user_id: str | None = None
) -> ApiKey:
    """Revoke a key (idempotent: a revoked key keeps its first `revoked_at`) and return it.

    NotFoundError if it does not exist, or (with `user_id`) is not that user's key.
    """
    key = await session.get(ApiKeyRow, key_id)
    if key is None or (user_id is not None and key.user_id != user_id):
        raise NotFoundError(f"API key {key_id!r} does not exist")
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        await session.flush()
    return _key(key)


async def disable_user(session: AsyncSession, *, user_id: str) -> User:
    """Disable a user (idempotent: a disabled user keeps its first `disabled_at`) and return it.

    NotFoundError if it does not exist; LastAdmin if it is the last active admin. The active
    admins are locked while counted, so two admins disabling each other at once cannot both
    succeed.
    """
    user = await session.get(UserRow, user_id)
    if user is None:
        raise NotFoundError(f"user {user_id!r} does not exist")
    if user.disabled_at is not None:
        return _user(user)
    if user.role == "admin":
        active = await session.scalars(
            select(UserRow)
            .where(UserRow.role == "admin", UserRow.disabled_at.is_(None))
            .order_by(UserRow.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        admins = {admin.id for admin in active}
        if user_id not in admins:  # disabled meanwhile
            return _user(user)
        if admins == {user_id}:
            raise LastAdmin(f"user {user_id!r} is the last active admin")
    user.disabled_at = utcnow()
    await session.flush()
    return _user(user)


async def list_api_keys(session: AsyncSession, *, user_id: str) -> list[ApiKey]:
    """The user's keys (revoked ones included), oldest first."""
    query = select(ApiKeyRow).where(ApiKeyRow.user_id == user_id)
    rows = await session.scalars(query.order_by(ApiKeyRow.created_at, ApiKeyRow.id))
    return [_key(record) for record in rows]


async def set_quota(
    session: AsyncSession,
    *,
    tenant_id: str,
    limit_cpu_m: int | None = None,
    limit_mem_mib: int | None = None,
    limit_accelerators: int | None = None,
    limit_mbps: int | None = None,
    limit_active_requests: int | None = None,
    national: bool = False,
) -> Quota:
    """Replace the tenant's limits (None: unlimited), or with `national` a regional brain's
    copy of its national limits (`models.Quota`), in the engine's units but accelerators
    whole (stored in thousandths). Usage is kept; a limit below current use only stops new
    reservations. Raises NotFoundError / TenantError."""
    limits = {
        "limit_cpu_m": limit_cpu_m,
        "limit_mem_mib": limit_mem_mib,
        "limit_accelerators": limit_accelerators,
        "limit_mbps": limit_mbps,
        "limit_active_requests": limit_active_requests,
    }
    for name, value in limits.items():
        if value is not None and value < 0:
            raise TenantError(f"quota {name} must not be negative ({value})")
    if await session.get(Tenant, tenant_id) is None:
        raise NotFoundError(f"tenant {tenant_id!r} does not exist")
    quota = await session.get(Quota, tenant_id, with_for_update=True, populate_existing=True)
    if quota is None:
        quota = _unlimited(tenant_id)
        session.add(quota)
    stored = dict(limits)
    whole = stored.pop("limit_accelerators")
    stored["limit_acc_milli"] = None if whole is None else accelerators_to_milli(whole)
    for name, value in stored.items():
        setattr(quota, name.replace("limit_", "national_") if national else name, value)
    await session.flush()
    return quota


@dataclass(frozen=True, slots=True)
class QuotaLimits:
    """A tenant's limits, in the engine's units (None: unlimited)."""

    cpu_m: int | None
    mem_mib: int | None
    acc_milli: int | None
    mbps: int | None
    active_requests: int | None


@dataclass(frozen=True, slots=True)
class QuotaUsed:
    """What a tenant's held reservations use of its quota, in the engine's units."""

    cpu_m: int
    mem_mib: int
    acc_milli: int
    mbps: int
    active_requests: int


_LIMITED = ("cpu_m", "mem_mib", "acc_milli", "mbps", "active_requests")
"""What a quota limits: each column is `limit_` or `national_` and one of these."""


def limits_of(quota: Quota, *, national: bool) -> QuotaLimits:
    """`quota`'s limits, or with `national` a regional brain's copy of the national ones."""
    prefix = "national_" if national else "limit_"
    return QuotaLimits(*(getattr(quota, prefix + name) for name in _LIMITED))


def used_of(quota: Quota) -> QuotaUsed:
    """What `quota`'s tenant's held reservations use of it."""
    return QuotaUsed(
        quota.used_cpu_m,
        quota.used_mem_mib,
        quota.used_acc_milli,
        quota.used_mbps,
        quota.active_requests,
    )


async def quota_used(session: AsyncSession, *, tenant_id: str) -> QuotaUsed | None:
    """What the tenant's held reservations use of its quota; None for an unknown tenant."""
    quota = await get_quota(session, tenant_id=tenant_id)
    return None if quota is None else used_of(quota)


async def limited_tenants(
    session: AsyncSession, tenant_ids: Iterable[str], *, national: bool
) -> set[str]:
    """Those of `tenant_ids` with at least one limit: of the limits this brain's ledger
    holds them to, or with `national` of a regional brain's copy of their national limits."""
    wanted = sorted(set(tenant_ids))
    if not wanted:
        return set()
    prefix = "national_" if national else "limit_"
    columns = [getattr(Quota, prefix + name) for name in _LIMITED]
    rows = await session.scalars(
        select(Quota.tenant_id).where(
            Quota.tenant_id.in_(wanted), or_(*(column.is_not(None) for column in columns))
        )
    )
    return set(rows)


async def get_quota(session: AsyncSession, *, tenant_id: str) -> Quota | None:
    """The tenant's limits and current use, as of now."""
    return await session.get(Quota, tenant_id, populate_existing=True)


def _unlimited(tenant_id: str) -> Quota:
    return Quota(
        tenant_id=tenant_id,
        used_cpu_m=0,
        used_mem_mib=0,
        used_acc_milli=0,
        used_mbps=0,
        active_requests=0,
    )


def _check_id(kind: str, value: str) -> None:
    if not _ID.match(value):
        raise TenantError(
            f"{kind} id {value!r} must be 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )


def _parse(token: str) -> tuple[str, str] | None:
    if not token.startswith(TOKEN_PREFIX):
        return None
    key_id, dot, secret = token[len(TOKEN_PREFIX) :].partition(".")
    if not dot or not secret or not _KEY_ID.match(key_id):
        return None
    return key_id, secret


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
