"""Following the federation's tenancy, which the national brain holds
(`national.tenancy`): every `interval_s` this brain asks for the changes after the last
version it took (`NationalTenancy.tenancy_since`), applies them to its own tables in version
order (`storage.tenancy_log.take`) and drops its cached verifications of the keys of every
user a change revoked a key of or disabled. Authentication stays on this brain's own tables.

An operator's change on this brain goes to the national brain first (`change`), then this
brain follows at once, so the change holds here when the answer leaves and on every other
brain within one interval.

Each process keeps the version it took in memory (from its database's log when it starts):
replicas sharing a database each take every change (taking one twice changes nothing) and
each forget their own cached verifications.
"""

import asyncio
import logging
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain.errors import CnbrainError
from cnbrain.domain.tenancy import TenancyChange
from cnbrain.federation.errors import PeerUnavailable
from cnbrain.regional.use_cases.ports import NationalTenancy
from cnbrain.storage import tenancy_log
from cnbrain.storage.tenants import QuotaUsed

log = logging.getLogger("cnbrain.regional")

PAGE = 500
"""Changes asked for in one call."""


class FollowTenancy:
    """This brain's tenancy, as region `region`, kept equal to the federation's (module
    docstring)."""

    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        national: NationalTenancy,
        forget_keys: Callable[[str], None],
        interval_s: float,
        region: str | None,
    ) -> None:
        self._sessions = sessions
        self._region = region
        self._national = national
        self._forget_keys = forget_keys
        self._interval_s = interval_s
        self._version: int | None = None
        self._lock = asyncio.Lock()

    @property
    def region(self) -> str | None:
        """The region this brain owns."""
        return self._region

    @property
    def version(self) -> int | None:
        """The last version this process took (None: not asked yet)."""
        return self._version

    async def change(self, change: TenancyChange, *, actor: str) -> TenancyChange:
        """Record `change` in the national brain, then follow it here; the change as
        recorded. Raises what `NationalTenancy.change_tenancy` raises; a change the national
        brain refused (the tenant exists already, say) is followed too, so what it refused
        on holds here when the refusal leaves. When following fails, it holds here at the
        next interval."""
        try:
            recorded = await self._national.change_tenancy(change, actor=actor)
        except PeerUnavailable:
            raise
        except CnbrainError:
            await self._follow_now()
            raise
        await self._follow_now()
        return recorded

    async def national_quota_use(self, tenant_id: str) -> QuotaUsed:
        """What the tenant's reservations use of its national quota, as the national brain
        answers (`NationalTenancy.national_quota_use`)."""
        return await self._national.national_quota_use(tenant_id)

    async def _follow_now(self) -> None:
        try:
            await self.once()
        except PeerUnavailable as error:
            log.warning("could not follow the federation's tenancy yet: %s", error)

    async def once(self) -> int:
        """Take every change after this process's version; how many it took. Raises
        PeerUnavailable when the national brain cannot be reached (what was taken before
        stays taken)."""
        async with self._lock:
            if self._version is None:
                async with self._sessions() as session:
                    self._version = await tenancy_log.latest_version(session)
            taken = 0
            while True:
                page = await self._national.tenancy_since(self._version, limit=PAGE)
                if page.latest_version < self._version:
                    log.warning(
                        "the national brain's tenancy is at version %d, below this brain's "
                        "%d: taking it again from the start",
                        page.latest_version,
                        self._version,
                    )
                    self._version = 0
                    continue
                if not page.changes:
                    return taken
                forget: set[str] = set()
                async with self._sessions.begin() as session:
                    for version, change in page.changes:
                        user = await tenancy_log.take(session, version, change, region=self._region)
                        if user is not None:
                            forget.add(user)
                self._version = page.changes[-1][0]
                taken += len(page.changes)
                for user in forget:
                    self._forget_keys(user)
                if self._version >= page.latest_version:
                    return taken

    async def run(self) -> None:
        """`once` every `interval_s`, until cancelled; an unreachable national brain is
        logged and asked again at the next interval, and so is a round that fails otherwise
        (this brain's database down, say)."""
        while True:
            try:
                taken = await self.once()
                if taken:
                    log.info("took %d tenancy changes from the national brain", taken)
            except PeerUnavailable as error:
                log.info("could not ask the national brain for tenancy changes: %s", error)
            except Exception:
                log.warning("could not take the federation's tenancy; trying again", exc_info=True)
            await asyncio.sleep(self._interval_s)
