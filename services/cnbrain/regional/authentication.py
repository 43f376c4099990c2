"""Who calls: the principal of a bearer token, verified in the database and trusted for a
short time without asking again."""

import asyncio
import hashlib
import time

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.regional.security import Principal, Role
from cnbrain.storage import tenants

AUTH_CACHE_S = 10.0
"""How long a verified key is trusted without asking the database: a key revoked (or a user
disabled) on one replica stops working there at once (`forget`), and on the other replicas
within this time; in a federation, every brain forgets it as it takes the revocation from the
national brain (`use_cases.tenancy_sync`)."""

MAX_CACHED = 10_000
"""Verified keys kept at the most; the cache starts afresh past it."""


class Authenticator:
    """Verifies API keys over the brain's database, one query per token at a time."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions
        self._verified: dict[str, tuple[Principal, float]] = {}
        """SHA-256 of a token -> (its principal, monotonic expiry)."""
        self._verifying: dict[str, asyncio.Future[Principal | None]] = {}
        """The verifications under way, by SHA-256 of the token."""

    async def principal_of(self, token: str) -> Principal | None:
        """The principal `token` authenticates (None: no valid key). Raises what the database
        raises when it must be asked and cannot answer."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        cached = self._verified.get(digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        principal = await self._verify_once(token, digest)
        if principal is None:
            return None
        if len(self._verified) > MAX_CACHED:
            self._verified.clear()
        self._verified[digest] = (principal, now + AUTH_CACHE_S)
        return principal

    def forget(self, user_id: str) -> None:
        """Drop the cached verifications of `user_id`'s keys: call after a transaction that
        revoked one of them or disabled the user committed."""
        stale = [d for d, (p, _) in self._verified.items() if p.user_id == user_id]
        for digest in stale:
            del self._verified[digest]

    async def _verify_once(self, token: str, digest: str) -> Principal | None:
        """The principal of `token` from the database. Concurrent calls for one token share
        one query: a client that opens with many requests at once costs one lookup and one
        connection, not one each."""
        under_way = self._verifying
        while (shared := under_way.get(digest)) is not None:
            try:
                return await asyncio.shield(shared)
            except asyncio.CancelledError:
                if not shared.cancelled():
                    raise  # this caller was cancelled
                # the caller that was verifying went away: verify anew
        future: asyncio.Future[Principal | None] = asyncio.get_running_loop().create_future()
        under_way[digest] = future
        try:
            async with self._sessions() as session:
                found = await tenants.authenticate(session, token=token)
            principal = None
            if found is not None:
                user, _ = found
                principal = Principal(
                    user_id=user.id, role=Role(user.role), tenant_id=user.tenant_id
                )
            future.set_result(principal)
            return principal
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # those waiting get it; nobody else needs to see it
            raise
        finally:
            del under_way[digest]
