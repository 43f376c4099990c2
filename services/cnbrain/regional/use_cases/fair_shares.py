"""Each tenant's fair share: its weight in the admission order, and its cohort with its nominal
quota and borrowing limit there (`cnbrain.storage.fair_shares`). Staff put and delete it,
each change audited in the transaction that makes it; anyone reads the share of a tenant it
may act for (a tenant's users and admins their own tenant's).

Amounts are sent in people's units (cores, GiB, accelerators by model) and stored in the
ledger's (millicores, MiB, whole GiB), each rounded up; read back, they are the stored
amounts in people's units again.

Errors are the domain's: Forbidden (not staff), NotFound (no such tenant, or one the caller
may not act for; nothing stored, to delete), Invalid naming the field (a number out of
bounds, a cohort that is not a cohort name, an accelerator model not in the catalog, a
borrowing limit without a cohort).
"""

from collections.abc import Callable
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cnbrain.domain import bounds
from cnbrain.domain.accelerators import ACCELERATOR_MODELS, MILLI
from cnbrain.domain.bounds import Name
from cnbrain.domain.errors import Invalid, NotFound
from cnbrain.netmap.arrays import (
    accelerators_to_milli,
    cores_to_millicores,
    gib_to_mib,
    whole_gib,
)
from cnbrain.regional.schemas import Strict
from cnbrain.regional.security import Principal
from cnbrain.regional.use_cases.tenancy import no_tenant, require_staff, require_visible
from cnbrain.scheduling.fair_share import DEFAULT_WEIGHT
from cnbrain.scheduling.resources import ACCELERATOR_PREFIX, CPU_M, MEM_MIB, STORAGE_GIB, Resources
from cnbrain.storage import audit, fair_shares, tenants
from cnbrain.storage.fair_shares import MAX_QUOTA_STORAGE_GIB, FairShare

AcceleratorCount = Annotated[int, Field(strict=True, ge=0, le=bounds.MAX_QUOTA_ACCELERATORS)]


class ResourceAmounts(Strict):
    """A resource vector in people's units; absent amounts are zero. At most what a whole map
    holds (`cnbrain.domain.bounds`)."""

    cpu_cores: float = Field(
        default=0.0, ge=0, le=bounds.MAX_QUOTA_CPU_CORES, strict=True, examples=[512]
    )
    memory_gib: float = Field(
        default=0.0, ge=0, le=bounds.MAX_QUOTA_MEMORY_GIB, strict=True, examples=[4096]
    )
    storage_gib: float = Field(
        default=0.0, ge=0, le=MAX_QUOTA_STORAGE_GIB, strict=True, examples=[10240]
    )
    accelerators: dict[Name, AcceleratorCount] = Field(
        default_factory=dict,
        description="Counts by accelerator model of the catalog.",
        examples=[{"A100": 64}],
    )


class FairShareBody(Strict):
    """A tenant's fair share as staff put it; the tenant is the path's."""

    weight: float = Field(
        default=DEFAULT_WEIGHT,
        gt=0,
        le=bounds.MAX_WEIGHT,
        strict=True,
        description="Its weight in the fair order of waiting requests: a tenant of weight 2 "
        "is given twice the dominant share of one of weight 1.",
    )
    cohort: str | None = Field(
        default=None,
        strict=True,
        description="The cohort it lends and borrows quota in: 1 to 63 letters, digits, '.', "
        "'_' or '-', starting with a letter or digit; null: none.",
        examples=["research"],
    )
    nominal: ResourceAmounts = Field(
        default_factory=ResourceAmounts,
        description="The quota it is always entitled to in its cohort.",
    )
    borrowing_limit: ResourceAmounts = Field(
        default_factory=ResourceAmounts,
        description="How much beyond its nominal it may borrow in its cohort; needs a cohort.",
    )


class FairShareView(BaseModel):
    """A tenant's fair share; `updated_at` null: none is stored, and these are the defaults."""

    tenant: str
    weight: float
    cohort: str | None
    nominal: ResourceAmounts
    borrowing_limit: ResourceAmounts
    updated_at: datetime | None


class ManageFairShares:
    """The tenants' fair shares in the brain's database."""

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], changed: Callable[[], None] = lambda: None
    ) -> None:
        self._sessions = sessions
        self._changed = changed
        """Told once a change of a share has committed."""

    async def get_share(self, principal: Principal, tenant_id: str) -> FairShareView:
        """The tenant's share (the defaults when none is stored). Raises NotFound for a tenant
        that does not exist or the caller may not act for."""
        require_visible(principal, tenant_id)
        async with self._sessions() as session:
            await _require_tenant(session, tenant_id)
            share = await fair_shares.get_share(session, tenant_id)
        return _view(tenant_id, share or FairShare())

    async def put_share(
        self, principal: Principal, tenant_id: str, body: FairShareBody
    ) -> tuple[FairShareView, bool]:
        """Store the tenant's share, replacing any; the share as stored, and whether none was
        stored before. Raises Forbidden (not staff), Invalid naming the field, or NotFound."""
        require_staff(principal)
        share = _share(body)
        async with self._sessions.begin() as session:
            await _require_tenant(session, tenant_id)
            created = await fair_shares.put_share(session, tenant_id, share)
            stored = await fair_shares.get_share(session, tenant_id)
            await audit.record(
                session,
                actor=principal.user_id,
                tenant_id=tenant_id,
                action="fair_share.created" if created else "fair_share.replaced",
                object_type="fair_share",
                object_id=tenant_id,
                detail=body.model_dump(),
            )
        self._changed()
        return _view(tenant_id, stored or share), created

    async def delete_share(self, principal: Principal, tenant_id: str) -> None:
        """Delete the tenant's stored share: it has the defaults again. Raises Forbidden (not
        staff) or NotFound (no such tenant, or none stored)."""
        require_staff(principal)
        async with self._sessions.begin() as session:
            await _require_tenant(session, tenant_id)
            if not await fair_shares.delete_share(session, tenant_id):
                raise NotFound(f"tenant {tenant_id!r} has no fair share stored")
            await audit.record(
                session,
                actor=principal.user_id,
                tenant_id=tenant_id,
                action="fair_share.deleted",
                object_type="fair_share",
                object_id=tenant_id,
            )
        self._changed()


def _share(body: FairShareBody) -> FairShare:
    return FairShare(
        weight=body.weight,
        cohort=body.cohort,
        nominal=_vector(body.nominal, field="nominal"),
        borrowing_limit=_vector(body.borrowing_limit, field="borrowing_limit"),
    )


def _vector(amounts: ResourceAmounts, *, field: str) -> Resources:
    """`amounts` in the ledger's units, each rounded up. Raises Invalid (field
    `<field>.accelerators`) for a model not in the catalog."""
    for model in amounts.accelerators:
        if model not in ACCELERATOR_MODELS:
            raise Invalid(
                f"{model!r} is not an accelerator model of the catalog: "
                f"{', '.join(ACCELERATOR_MODELS)}",
                field=f"{field}.accelerators",
            )
    return Resources.of(
        cpu_m=cores_to_millicores(amounts.cpu_cores),
        mem_mib=gib_to_mib(amounts.memory_gib),
        storage_gib=whole_gib(amounts.storage_gib),
        accelerators={m: accelerators_to_milli(n) for m, n in amounts.accelerators.items()},
    )


def _amounts(vector: Resources) -> ResourceAmounts:
    accelerators = {
        dimension.removeprefix(ACCELERATOR_PREFIX): amount // MILLI
        for dimension, amount in vector.amounts.items()
        if dimension.startswith(ACCELERATOR_PREFIX)
    }
    return ResourceAmounts(
        cpu_cores=vector[CPU_M] / 1000,
        memory_gib=vector[MEM_MIB] / 1024,
        storage_gib=float(vector[STORAGE_GIB]),
        accelerators=accelerators,
    )


def _view(tenant_id: str, share: FairShare) -> FairShareView:
    return FairShareView(
        tenant=tenant_id,
        weight=share.weight,
        cohort=share.cohort,
        nominal=_amounts(share.nominal),
        borrowing_limit=_amounts(share.borrowing_limit),
        updated_at=share.updated_at,
    )


async def _require_tenant(session: AsyncSession, tenant_id: str) -> None:
    if await tenants.get_tenant(session, tenant_id=tenant_id) is None:
        raise no_tenant(tenant_id)
