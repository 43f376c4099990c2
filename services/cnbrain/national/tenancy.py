"""The federation's tenancy, which the national brain holds: a regional brain forwards an
operator's change here, where it is checked against the national brain's tables, applied,
audited and recorded at the next version (`storage.tenancy_log`); every regional brain
follows the recorded changes (`regional.use_cases.tenancy_sync`)."""

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.tenancy import TenancyChange, subject_of
from cnbrain.storage import audit, tenancy_log, tenants
from cnbrain.storage.tenants import QuotaUsed


class FederationTenancy:
    """Recording and reading the federation's tenancy changes."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def change(self, change: TenancyChange, *, actor: str) -> tuple[int, TenancyChange]:
        """Record `change`, audited as made by `actor`; its version and the change as
        recorded. Raises what `tenancy_log.record` raises (then nothing changed)."""
        async with self._sessions.begin() as session:
            version, recorded = await tenancy_log.record(session, change)
            object_type, object_id, tenant_id = subject_of(recorded)
            await audit.record(
                session,
                actor=actor,
                tenant_id=tenant_id,
                action=recorded.kind,
                object_type=object_type,
                object_id=object_id,
                detail={"version": version},
            )
        return version, recorded

    async def since(
        self, version: int, *, limit: int
    ) -> tuple[list[tuple[int, TenancyChange]], int]:
        """The first `limit` changes after `version`, and the latest version."""
        async with self._sessions() as session:
            changes = await tenancy_log.changes_since(session, version=version, limit=limit)
            latest = await tenancy_log.latest_version(session)
        return changes, max(latest, changes[-1][0] if changes else 0)

    async def quota_used(self, tenant_id: str) -> QuotaUsed | None:
        """What the national brain's parts of the tenant's reservations use of its national
        quota; None for a tenant it does not know."""
        async with self._sessions() as session:
            return await tenants.quota_used(session, tenant_id=tenant_id)
