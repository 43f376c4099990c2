"""The federation's tenancy log (`cnbrain.domain.tenancy`) and its changes applied to the
tenants, users, API keys and quotas of a brain's database.

- The national brain `record`s a change: it checks it against its own tables (a tenant, user
  or key that exists already, an unknown one, a disabled user, the last active admin are
  refused), applies it and appends it at the next version, under one lock, so versions are
  taken in commit order: a reader that has seen version v has seen every version below it.
- A regional brain `take`s the national brain's changes in version order: each one applied
  as it stands (what exists already is brought in line, nothing is refused) and appended at
  the national brain's version, so taking a change twice changes nothing.

Only a quota's limits travel; what a tenant's held reservations use stays each brain's own.
The national brain's own limits are the national ones (`models.Quota`): it applies a quota
set at level "national" and logs the region-level ones.
"""

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain.tenancy import (
    ApiKeyCreated,
    ApiKeyRevoked,
    QuotaSet,
    TenancyChange,
    TenantCreated,
    UserCreated,
    UserDisabled,
    change_document,
    change_from_document,
)
from cnbrain.storage import known_regions, tenants
from cnbrain.storage._sql import fetch_scalar
from cnbrain.storage.clock import utcnow
from cnbrain.storage.database import advisory_lock, insert_on_conflict
from cnbrain.storage.errors import NotFoundError, TenancyConflict
from cnbrain.storage.models import ApiKey as ApiKeyRow
from cnbrain.storage.models import TenancyLogRecord, Tenant
from cnbrain.storage.models import User as UserRow

TENANCY_LOCK = 0x636E_6272_7E4A
"""The advisory lock under which the national brain takes the next version."""


async def latest_version(session: AsyncSession) -> int:
    """The highest version in this brain's log (0: none)."""
    return int(await fetch_scalar(session, select(func.max(TenancyLogRecord.version))) or 0)


async def record(session: AsyncSession, change: TenancyChange) -> tuple[int, TenancyChange]:
    """Check `change` against this brain's tables, apply it and append it to the log at the
    next version; returns that version and the change as recorded (with its time). Raises
    TenancyConflict (exists already, disabled user), NotFoundError, LastAdmin or
    TenantError; then nothing is written."""
    await advisory_lock(session, TENANCY_LOCK)
    recorded = await _apply_checked(session, change.model_copy(update={"at": utcnow()}))
    version = await latest_version(session) + 1
    session.add(TenancyLogRecord(version=version, change=change_document(recorded)))
    await session.flush()
    return version, recorded


async def made_through_federation(session: AsyncSession, user_id: str) -> bool:
    """Whether user `user_id` was made through the federation's tenancy (a change in this
    brain's log creates it), so that every brain knows it; a brain's own first admin was
    not."""
    r = TenancyLogRecord
    found = await fetch_scalar(
        session,
        select(r.version)
        .where(
            r.change["kind"].as_string() == "user.created",
            r.change["user_id"].as_string() == user_id,
        )
        .limit(1),
    )
    return found is not None


async def changes_since(
    session: AsyncSession, *, version: int, limit: int
) -> list[tuple[int, TenancyChange]]:
    """The first `limit` changes after `version`, in version order."""
    rows = await session.execute(
        select(TenancyLogRecord.version, TenancyLogRecord.change)
        .where(TenancyLogRecord.version > version)
        .order_by(TenancyLogRecord.version)
        .limit(limit)
    )
    return [(int(v), change_from_document(document)) for v, document in rows]


async def take(
    session: AsyncSession, version: int, change: TenancyChange, *, region: str | None
) -> str | None:
    """Apply the national brain's `change` at `version` as it stands in this brain, which
    owns `region`, and append it to this brain's log (once: a version taken already is kept
    as it was). A quota's limits for other regions are logged, not applied. Returns the user
    whose keys' cached verifications must be forgotten (a key revoked, a user disabled), if
    any."""
    at = change.at or utcnow()
    forget = await _apply_taken(session, change, at, region)
    await session.execute(
        insert_on_conflict(session, TenancyLogRecord)
        .values(version=version, change=change_document(change), recorded_at=utcnow())
        .on_conflict_do_nothing(index_elements=["version"])
    )
    return forget


async def _apply_checked(session: AsyncSession, change: TenancyChange) -> TenancyChange:
    """`change` applied to this brain's tables after the national brain's checks; returns
    it with the time that holds (a revoked key keeps its first revocation, a disabled user
    its first disabling)."""
    at = change.at or utcnow()
    match change:
        case TenantCreated():
            if await tenants.get_tenant(session, tenant_id=change.tenant_id) is not None:
                raise TenancyConflict(f"tenant {change.tenant_id!r} exists already")
            await _create_tenant(session, change, at)
        case UserCreated():
            if await session.get(UserRow, change.user_id) is not None:
                raise TenancyConflict(f"user {change.user_id!r} exists already")
            await _create_user(session, change, at)
        case UserDisabled():
            user = await tenants.disable_user(session, user_id=change.user_id)
            return change.model_copy(update={"at": user.disabled_at})
        case ApiKeyCreated():
            owner = await tenants.get_user(session, user_id=change.user_id)
            if owner is None:
                raise NotFoundError(f"user {change.user_id!r} does not exist")
            if owner.disabled_at is not None:
                raise TenancyConflict(f"user {change.user_id!r} is disabled")
            if await session.get(ApiKeyRow, change.key_id) is not None:
                raise TenancyConflict(f"API key {change.key_id!r} exists already")
            await _install_key(session, change, at)
        case ApiKeyRevoked():
            key = await tenants.revoke_api_key(
                session, key_id=change.key_id, user_id=change.user_id
            )
            return change.model_copy(update={"at": key.revoked_at})
        case QuotaSet():
            await _check_quota(session, change)
            if change.level == "national":
                await _set_quota(session, change, national=False)
    return change


async def _apply_taken(
    session: AsyncSession, change: TenancyChange, at: datetime, region: str | None
) -> str | None:
    match change:
        case TenantCreated():
            tenant = await session.get(Tenant, change.tenant_id)
            if tenant is None:
                await _create_tenant(session, change, at)
            else:
                tenant.name = change.name
        case UserCreated():
            user = await session.get(UserRow, change.user_id)
            if user is None:
                await _create_user(session, change, at)
            else:
                user.name, user.role, user.tenant_id = change.name, change.role, change.tenant_id
        case UserDisabled():
            user = await session.get(UserRow, change.user_id)
            if user is not None and user.disabled_at is None:
                user.disabled_at = at
            return change.user_id
        case ApiKeyCreated():
            if await session.get(ApiKeyRow, change.key_id) is None:
                await _install_key(session, change, at)
        case ApiKeyRevoked():
            key = await session.get(ApiKeyRow, change.key_id)
            if key is not None and key.revoked_at is None:
                key.revoked_at = at
            return change.user_id
        case QuotaSet():
            if change.level == "national":
                await _set_quota(session, change, national=True)
            elif change.applies_to(region):
                await _set_quota(session, change, national=False)
    await session.flush()
    return None


async def _create_tenant(session: AsyncSession, change: TenantCreated, at: datetime) -> None:
    tenant = await tenants.create_tenant(session, tenant_id=change.tenant_id, name=change.name)
    tenant.created_at = at
    await session.flush()


async def _create_user(session: AsyncSession, change: UserCreated, at: datetime) -> None:
    await tenants.create_user(
        session,
        name=change.name,
        role=change.role,
        tenant_id=change.tenant_id,
        user_id=change.user_id,
    )
    row = await session.get(UserRow, change.user_id)
    assert row is not None
    row.created_at = at
    await session.flush()


async def _install_key(session: AsyncSession, change: ApiKeyCreated, at: datetime) -> None:
    await tenants.install_api_key(
        session,
        key_id=change.key_id,
        user_id=change.user_id,
        secret_sha256=change.secret_sha256,
        created_at=at,
    )


async def _check_quota(session: AsyncSession, change: QuotaSet) -> None:
    """NotFoundError unless the tenant, and the region a set names, are known here."""
    if await tenants.get_tenant(session, tenant_id=change.tenant_id) is None:
        raise NotFoundError(f"tenant {change.tenant_id!r} does not exist")
    if change.region is not None and not await known_regions.known(session, change.region):
        raise NotFoundError(f"region {change.region!r} has never registered")


async def _set_quota(session: AsyncSession, change: QuotaSet, *, national: bool) -> None:
    await tenants.set_quota(
        session,
        national=national,
        tenant_id=change.tenant_id,
        limit_cpu_m=change.limit_cpu_m,
        limit_mem_mib=change.limit_mem_mib,
        limit_accelerators=change.limit_accelerators,
        limit_mbps=change.limit_mbps,
        limit_active_requests=change.limit_active_requests,
    )
