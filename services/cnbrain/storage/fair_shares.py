"""Each tenant's terms in the admission queue, in the database (table `fair_shares`).

A tenant's `FairShare` is its weight in the fair order (`cnbrain.scheduling.fair_share`), the
cohort it lends and borrows quota in (None: none), and its nominal quota and borrowing limit
there (`cnbrain.scheduling.cohorts.TenantQuota`), resource vectors in the ledger's units. A
tenant without a stored share has `FairShare()`: weight 1, no cohort, no nominal quota.

`admission_terms` reads every stored share at once, for an admission round: the weights, the
cohorts built from their members' quotas, and each member's cohort. `cohorts_of` reads, in
one query, only the cohorts some given tenants are in (every member of each), for a placement
that holds those tenants to their cohort quota. A stored row that no
longer validates (say, written by hand) is left out, and logged: its tenant then has the
defaults, as `get_share` says too. Writes to one tenant's share take turns on its tenant row.
"""

import logging
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.domain import bounds
from cnbrain.domain.errors import Invalid
from cnbrain.netmap.arrays import accelerators_to_milli
from cnbrain.scheduling.checks import checked_int, checked_name, checked_number
from cnbrain.scheduling.cohorts import Cohort, TenantQuota
from cnbrain.scheduling.fair_share import DEFAULT_WEIGHT
from cnbrain.scheduling.resources import ACCELERATOR_PREFIX, CPU_M, MEM_MIB, STORAGE_GIB, Resources
from cnbrain.storage._sql import execute_counted
from cnbrain.storage.clock import as_utc, utcnow
from cnbrain.storage.errors import NotFoundError
from cnbrain.storage.models import FairShareRecord, Tenant

__all__ = [
    "COHORT_PATTERN",
    "MAX_AMOUNTS",
    "MAX_COHORT_NAME_LENGTH",
    "MAX_QUOTA_STORAGE_GIB",
    "AdmissionTerms",
    "FairShare",
    "admission_terms",
    "cohorts_of",
    "delete_share",
    "get_share",
    "put_share",
]

log = logging.getLogger("cnbrain.storage")

MAX_COHORT_NAME_LENGTH: Final = 63
"""The longest cohort name (the column's length)."""

COHORT_PATTERN: Final = re.compile(
    rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_COHORT_NAME_LENGTH - 1}}}$"
)
"""A cohort name: a letter or digit, then letters, digits, '.', '_' or '-'."""

MAX_QUOTA_STORAGE_GIB: Final = bounds.MAX_SITES * bounds.MAX_STORAGE_GIB
"""A tenant's storage quota: at most what a whole map holds (GiB)."""

MAX_AMOUNTS: Final = {
    CPU_M: bounds.MAX_QUOTA_CPU_CORES * 1000,
    MEM_MIB: bounds.MAX_QUOTA_MEMORY_GIB * 1024,
    STORAGE_GIB: MAX_QUOTA_STORAGE_GIB,
}
"""The largest amount of each dimension of a nominal quota or borrowing limit, in the
ledger's units; each accelerator dimension's is `bounds.MAX_QUOTA_ACCELERATORS` whole
accelerators, in thousandths."""


@dataclass(frozen=True, slots=True)
class FairShare:
    """A tenant's terms in the admission queue (module docstring); `updated_at` is when it
    was stored (None: not stored), and is not compared.

    Raises `Invalid` naming the field for a weight that is not positive, finite and at most
    `bounds.MAX_WEIGHT`; a cohort that is not a cohort name (`COHORT_PATTERN`); a vector with
    a dimension other than `cpu_m`, `mem_mib`, `storage_gib` and `accelerator:<model>`, or an
    amount below 0 or above `MAX_AMOUNTS`; and a borrowing limit without a cohort to borrow
    in."""

    weight: float = DEFAULT_WEIGHT
    cohort: str | None = None
    nominal: Resources = field(default_factory=Resources)
    borrowing_limit: Resources = field(default_factory=Resources)
    updated_at: datetime | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        weight = checked_number(self.weight, field="weight", low=0.0, high=float(bounds.MAX_WEIGHT))
        if weight <= 0:
            raise Invalid("must be positive", field="weight")
        object.__setattr__(self, "weight", weight)
        if self.cohort is not None:
            cohort = checked_name(self.cohort, field="cohort")
            if not COHORT_PATTERN.fullmatch(cohort):
                raise Invalid(
                    f"must be 1 to {MAX_COHORT_NAME_LENGTH} letters, digits, '.', '_' or '-', "
                    "starting with a letter or digit",
                    field="cohort",
                )
        for name in ("nominal", "borrowing_limit"):
            _check_vector(getattr(self, name), field=name)
        if self.cohort is None and not self.borrowing_limit.is_zero():
            raise Invalid("a borrowing limit needs a cohort to borrow in", field="borrowing_limit")

    @property
    def quota(self) -> TenantQuota:
        """The tenant's quota in its cohort."""
        return TenantQuota(nominal=self.nominal, borrowing_limit=self.borrowing_limit)


@dataclass(frozen=True, slots=True)
class AdmissionTerms:
    """Every stored share, as an admission round uses them: `weights` of the tenants with a
    stored share, `cohorts` by name (their members those that name them, by tenant id), and
    `cohort_of` each member's cohort name."""

    weights: dict[str, float] = field(default_factory=dict)
    cohorts: dict[str, Cohort] = field(default_factory=dict)
    cohort_of: dict[str, str] = field(default_factory=dict)


def _check_vector(vector: object, *, field: str) -> None:
    if not isinstance(vector, Resources):
        raise Invalid("must be a resource vector", field=field)
    for dimension, amount in vector.amounts.items():
        at = f"{field}.{dimension}"
        if dimension.startswith(ACCELERATOR_PREFIX):
            checked_name(dimension.removeprefix(ACCELERATOR_PREFIX), field=at)
            high = accelerators_to_milli(bounds.MAX_QUOTA_ACCELERATORS)
        elif dimension in MAX_AMOUNTS:
            high = MAX_AMOUNTS[dimension]
        else:
            raise Invalid(
                f"is not a dimension of a quota: {', '.join(MAX_AMOUNTS)} or "
                f"{ACCELERATOR_PREFIX}<model>",
                field=at,
            )
        checked_int(amount, field=at, low=0, high=high)


def _vector(raw: object, *, field: str) -> Resources:
    if not isinstance(raw, dict):
        raise Invalid("must be an object of amounts", field=field)
    return Resources(raw)


def _share(record: FairShareRecord) -> FairShare:
    """The share of a stored row; raises `Invalid` when the row no longer validates."""
    return FairShare(
        weight=record.weight,
        cohort=record.cohort,
        nominal=_vector(record.nominal, field="nominal"),
        borrowing_limit=_vector(record.borrowing_limit, field="borrowing_limit"),
        updated_at=as_utc(record.updated_at),
    )


def _valid_share(record: FairShareRecord) -> FairShare | None:
    try:
        return _share(record)
    except Invalid as exc:
        log.warning(
            "the stored fair share of tenant %r is not valid and is left out: %s",
            record.tenant_id,
            exc,
        )
        return None


async def get_share(session: AsyncSession, tenant_id: str) -> FairShare | None:
    """The stored share of the tenant; None when none is stored, or the stored one no
    longer validates (logged)."""
    record = await session.get(FairShareRecord, tenant_id, populate_existing=True)
    return None if record is None else _valid_share(record)


async def put_share(session: AsyncSession, tenant_id: str, share: FairShare) -> bool:
    """Store `share` as the tenant's, replacing any; True when it had none stored. Raises
    NotFoundError for an unknown tenant."""
    tenant = await session.get(Tenant, tenant_id, with_for_update={"key_share": True})
    if tenant is None:
        raise NotFoundError(f"tenant {tenant_id!r} does not exist")
    record = await session.get(FairShareRecord, tenant_id, populate_existing=True)
    created = record is None
    if record is None:
        record = FairShareRecord(tenant_id=tenant_id)
        session.add(record)
    record.weight = share.weight
    record.cohort = share.cohort
    record.nominal = _amounts(share.nominal)
    record.borrowing_limit = _amounts(share.borrowing_limit)
    record.updated_at = utcnow()
    await session.flush()
    return created


async def delete_share(session: AsyncSession, tenant_id: str) -> bool:
    """Delete the tenant's stored share (it then has the defaults); False when none was
    stored."""
    deleted = await execute_counted(
        session, delete(FairShareRecord).where(FairShareRecord.tenant_id == tenant_id)
    )
    return deleted > 0


async def admission_terms(session: AsyncSession) -> AdmissionTerms:
    """Every stored share that validates, in one query (module docstring)."""
    records = await session.scalars(
        select(FairShareRecord)
        .order_by(FairShareRecord.tenant_id)
        .execution_options(populate_existing=True)
    )
    return _terms(records)


async def cohorts_of(session: AsyncSession, tenant_ids: Collection[str]) -> AdmissionTerms:
    """The terms of the members of every cohort one of `tenant_ids` names, in one query: the
    same cohorts (and members' weights) `admission_terms` has for them, and nothing for a
    tenant in no cohort. Nothing is read for no tenants."""
    if not tenant_ids:
        return AdmissionTerms()
    share = FairShareRecord
    named = (
        select(share.cohort)
        .where(share.tenant_id.in_(sorted(tenant_ids)), share.cohort.is_not(None))
        .scalar_subquery()
    )
    records = await session.scalars(
        select(share)
        .where(share.cohort.in_(named))
        .order_by(share.tenant_id)
        .execution_options(populate_existing=True)
    )
    return _terms(records)


def _terms(records: Iterable[FairShareRecord]) -> AdmissionTerms:
    """The terms of the stored shares `records` that validate."""
    weights: dict[str, float] = {}
    members: dict[str, dict[str, TenantQuota]] = {}
    cohort_of: dict[str, str] = {}
    for record in records:
        share = _valid_share(record)
        if share is None:
            continue
        weights[record.tenant_id] = share.weight
        if share.cohort is not None:
            members.setdefault(share.cohort, {})[record.tenant_id] = share.quota
            cohort_of[record.tenant_id] = share.cohort
    cohorts = {name: Cohort(name, quotas) for name, quotas in members.items()}
    return AdmissionTerms(weights=weights, cohorts=cohorts, cohort_of=cohort_of)


def _amounts(vector: Resources) -> dict[str, Any]:
    return dict(vector.amounts)
