"""FastAPI dependencies: the brain, a database session, and the authenticated caller."""

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.regional.brain import Brain
from cnbrain.regional.problems import ApiError, forbidden
from cnbrain.regional.security import Principal, Role
from cnbrain.regional.use_cases import RequestUseCases
from cnbrain.regional.use_cases.admin import AdminUseCases
from cnbrain.storage import tenants

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer ck_...`")


# The dependencies are coroutines even where they need not be: FastAPI runs a plain function
# dependency in its thread pool, a thread hop per call and request.


async def get_brain(request: Request) -> Brain:
    brain: Brain = request.app.state.brain
    return brain


BrainDep = Annotated[Brain, Depends(get_brain)]


async def get_use_cases(request: Request) -> RequestUseCases:
    cases: RequestUseCases = request.app.state.use_cases
    return cases


UseCasesDep = Annotated[RequestUseCases, Depends(get_use_cases)]


async def get_session(brain: BrainDep) -> AsyncIterator[AsyncSession]:
    async with brain.sessions() as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session)]


AUTH_CACHE_S = 10.0
"""How long a verified key is trusted without asking the database: a key revoked (or a user
disabled) on one replica stops working there at once (`forget_verified`), and on the other
replicas within this time."""


def forget_verified(brain: Brain, user_id: str) -> None:
    """Drop this replica's cached verifications of `user_id`'s keys: call after a transaction
    that revoked one of them or disabled the user committed."""
    stale = [d for d, (principal, _) in brain.verified_keys.items() if principal.user_id == user_id]
    for digest in stale:
        del brain.verified_keys[digest]


async def get_principal(
    brain: BrainDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    unauthorized = ApiError(
        401,
        "Unauthorized",
        "send an API key as `Authorization: Bearer <key>`",
        headers={"WWW-Authenticate": "Bearer"},
    )
    if credentials is None:
        raise unauthorized
    token = credentials.credentials
    digest = hashlib.sha256(token.encode()).hexdigest()
    now = time.monotonic()
    cached = brain.verified_keys.get(digest)
    if cached is not None and cached[1] > now:
        return cached[0]
    principal = await _verify_once(brain, token, digest)
    if principal is None:
        raise unauthorized
    if len(brain.verified_keys) > 10_000:
        brain.verified_keys.clear()
    brain.verified_keys[digest] = (principal, now + AUTH_CACHE_S)
    return principal


async def _verify_once(brain: Brain, token: str, digest: str) -> Principal | None:
    """The principal of `token` from the database (None: no valid key). Concurrent calls for
    one token share one query: a client that opens with many requests at once costs one
    lookup and one connection, not one each."""
    under_way = brain.verifying
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
        async with brain.sessions() as session:
            found = await tenants.authenticate(session, token=token)
        principal = None
        if found is not None:
            user, _ = found
            principal = Principal(user_id=user.id, role=Role(user.role), tenant_id=user.tenant_id)
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


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def require(*roles: Role) -> Callable[[Principal], Coroutine[Any, Any, Principal]]:
    """A dependency that admits only `roles`."""
    allowed = frozenset(roles)

    async def check(principal: PrincipalDep) -> Principal:
        if principal.role not in allowed:
            raise forbidden(f"this needs one of the roles {', '.join(sorted(allowed))}")
        return principal

    return check


StaffDep = Annotated[Principal, Depends(require(Role.OPERATOR, Role.ADMIN))]
AdminDep = Annotated[Principal, Depends(require(Role.ADMIN))]


async def get_admin_use_cases(request: Request) -> AdminUseCases:
    cases: AdminUseCases = request.app.state.admin
    return cases


AdminUseCasesDep = Annotated[AdminUseCases, Depends(get_admin_use_cases)]
