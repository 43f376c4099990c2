"""FastAPI dependencies: the parts of the brain a route uses, and the authenticated caller."""

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from cnbrain.federation.auditor import LedgerAuditor
from cnbrain.regional.composition import RegionalBrain
from cnbrain.regional.dispatcher import Dispatcher
from cnbrain.regional.federated_reads import FederatedReads
from cnbrain.regional.forwarding import Forwarder
from cnbrain.regional.problems import ApiError, forbidden
from cnbrain.regional.security import Principal, Role
from cnbrain.regional.settings import Settings
from cnbrain.regional.use_cases import RequestUseCases
from cnbrain.regional.use_cases.admin import AdminUseCases
from cnbrain.regional.use_cases.map_admin import MapAdministration
from cnbrain.regional.use_cases.priority_classes import ManagePriorityClasses
from cnbrain.telemetry.tenant import note_tenant

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer ck_...`")


# The dependencies are coroutines even where they need not be: FastAPI runs a plain function
# dependency in its thread pool, a thread hop per call and request.


async def get_brain(request: Request) -> RegionalBrain:
    brain: RegionalBrain = request.app.state.brain
    return brain


BrainDep = Annotated[RegionalBrain, Depends(get_brain)]
"""The whole brain: only for what is about all of it (readiness)."""


async def get_use_cases(brain: BrainDep) -> RequestUseCases:
    return brain.requests


UseCasesDep = Annotated[RequestUseCases, Depends(get_use_cases)]


async def get_admin_use_cases(brain: BrainDep) -> AdminUseCases:
    return brain.admin


AdminUseCasesDep = Annotated[AdminUseCases, Depends(get_admin_use_cases)]


async def get_map_admin(brain: BrainDep) -> MapAdministration:
    return brain.map_admin


MapAdminDep = Annotated[MapAdministration, Depends(get_map_admin)]


async def get_priority_classes(brain: BrainDep) -> ManagePriorityClasses:
    return brain.priority_classes


PriorityClassesDep = Annotated[ManagePriorityClasses, Depends(get_priority_classes)]


async def get_forwarder(brain: BrainDep) -> Forwarder | None:
    return brain.forwarder


ForwarderDep = Annotated[Forwarder | None, Depends(get_forwarder)]
"""In a federation, what forwards a tenant's call another region must answer (else None)."""


async def get_federated_reads(brain: BrainDep) -> FederatedReads | None:
    if brain.forwarder is None:
        return None
    return FederatedReads(brain.forwarder, brain.requests.read, brain.admin.usage, brain.sessions)


FederatedReadsDep = Annotated[FederatedReads | None, Depends(get_federated_reads)]
"""In a federation, the listing and usage of every region (else None: this brain's own)."""


async def get_dispatcher(brain: BrainDep) -> Dispatcher:
    return brain.dispatcher


DispatcherDep = Annotated[Dispatcher, Depends(get_dispatcher)]


async def get_auditor(brain: BrainDep) -> LedgerAuditor:
    return brain.auditor


AuditorDep = Annotated[LedgerAuditor, Depends(get_auditor)]


async def get_settings(brain: BrainDep) -> Settings:
    return brain.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


async def get_principal(
    brain: BrainDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is not None:
        principal = await brain.authenticator.principal_of(credentials.credentials)
        if principal is not None:
            note_tenant(principal.tenant_id)  # for the call's logs and span
            return principal
    raise ApiError(
        401,
        "Unauthorized",
        "send an API key as `Authorization: Bearer <key>`",
        headers={"WWW-Authenticate": "Bearer"},
    )


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
