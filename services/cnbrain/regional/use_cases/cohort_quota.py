"""Reservations held to their tenants' cohort quotas: the rule of the admission round
(`scheduling.cohorts.Cohort.can_admit`) applied in the unit of work that takes them.

`reserve_within_cohorts` takes claims as `ledger_store.reserve_many` does, and then, for the
claims of tenants in a cohort, checks in claim order that each tenant may add its claim to
what it holds (with its claims before it that were not refused): within its nominal quota,
or borrowing no more than its borrowing limit and what the cohort's other members leave
unused. When any is refused, it raises with every refusal, so that the caller may roll back
and take the others again without them. What a tenant holds is what the round counts: its
held reservations in this brain's ledger (`running_work.held_usage`, the claims being taken
left out).

Concurrency: `reserve_many` locks the quota rows of every member of those cohorts with the
claims' own (one locking read, in the ledger's lock order), and they stay locked until the
transaction ends. Every reservation locks its tenant's quota row, so no member of the cohort
takes a reservation between the check and the commit: two placements that would together go
over the quota take turns, and the second sees the first's holdings.

Cost: one query per call (the cohorts of the claims' tenants); for tenants in no cohort,
nothing else is read or locked.
"""

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.ledger.claim import Claim
from cnbrain.scheduling.resources import Resources
from cnbrain.storage import fair_shares, ledger_store
from cnbrain.storage.errors import CohortQuotaExceeded
from cnbrain.storage.running_work import demand_of, held_usage


async def reserve_within_cohorts(session: AsyncSession, *, claims: Sequence[Claim]) -> None:
    """Take `claims` with `ledger_store.reserve_many` in the caller's transaction and hold
    them to their tenants' cohort quotas (module docstring). Raises what `reserve_many`
    raises, or `CohortQuotaExceeded` with the reason of every claim refused, by request id
    (the caller rolls back)."""
    if not claims:
        return
    tenants = {claim.tenant_id for claim in claims}
    terms = await fair_shares.cohorts_of(session, tenants)
    held = {tenant: terms.cohort_of[tenant] for tenant in tenants if tenant in terms.cohort_of}
    if not held:
        await ledger_store.reserve_many(session, claims=claims)
        return
    members = {m for name in set(held.values()) for m in terms.cohorts[name].members}
    await ledger_store.reserve_many(session, claims=claims, lock_tenants=members)
    usage = await held_usage(session, members, excluding={c.reservation_id for c in claims})
    first: tuple[str, str] | None = None
    refusals: dict[str, str] = {}
    for claim in claims:
        name = held.get(claim.tenant_id)
        if name is None:
            continue
        cohort = terms.cohorts[name]
        demand = _demand(claim)
        verdict = cohort.can_admit(claim.tenant_id, demand, usage)
        if not verdict.admitted:
            reason = verdict.reason or "over its quota"
            first = first or (cohort.name, reason)
            refusals[claim.request_id] = CohortQuotaExceeded.refusal_of(cohort.name, reason)
            continue
        usage[claim.tenant_id] = usage.get(claim.tenant_id, Resources()) + demand
    if first is not None:
        raise CohortQuotaExceeded(*first, refusals)


def _demand(claim: Claim) -> Resources:
    return demand_of(
        cpu_m=claim.cpu_m,
        mem_mib=claim.mem_mib,
        storage_gib=claim.storage_gib,
        accelerator_model=claim.accelerator_model,
        accelerator_count=claim.accelerator_count,
    )
