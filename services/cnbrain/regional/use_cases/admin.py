"""The regional brain's use cases for administration: tenancy, fair shares, usage and the
audit log, each depending on the database's sessions only, and tenancy on a way to forget the
cached verifications of a user's keys."""

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.regional.use_cases.audit_log import AuditLog
from cnbrain.regional.use_cases.fair_shares import ManageFairShares
from cnbrain.regional.use_cases.tenancy import ManageTenants, ManageUsers
from cnbrain.regional.use_cases.tenancy_sync import FollowTenancy
from cnbrain.regional.use_cases.usage_reports import UsageReports


@dataclass(frozen=True, slots=True, eq=False)
class AdminUseCases:
    tenants: ManageTenants
    users: ManageUsers
    usage: UsageReports
    audit: AuditLog
    fair_shares: ManageFairShares

    @classmethod
    def build(
        cls,
        *,
        sessions: async_sessionmaker[AsyncSession],
        forget_keys: Callable[[str], None],
        fair_shares_changed: Callable[[], None] = lambda: None,
        tenancy: FollowTenancy | None = None,
    ) -> "AdminUseCases":
        """The use cases on the database of `sessions`; `forget_keys(user_id)` drops this
        replica's cached verifications of the user's keys (after a revocation or disabling
        committed); `fair_shares_changed()` is told after a change of a fair share;
        `tenancy`, in a federation, follows the national brain's tenancy, through which
        tenancy changes go."""
        return cls(
            tenants=ManageTenants(sessions, federation=tenancy),
            users=ManageUsers(sessions=sessions, forget_keys=forget_keys, federation=tenancy),
            usage=UsageReports(sessions),
            audit=AuditLog(sessions),
            fair_shares=ManageFairShares(sessions, changed=fair_shares_changed),
        )
