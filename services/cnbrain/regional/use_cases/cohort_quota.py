"""Reservations held to their tenants' cohort quotas: the rule of the admission round
(`scheduling.cohorts.Cohort.can_admit`) applied in the unit of work that takes them.

`reserve_within_cohorts` takes claims as `ledger_store.reserve_many` does, and then, for the
claims of tenants in a cohort, checks in claim order that each tenant may add its claim to
what it holds (with its claims before it that were not refused): within its nominal quota,
or borrowing no more than its borrowing limit and what the cohort's other members leave
unused. When any is refused, it raises with every refusal, so that the caller may roll back
and take the others again without them. What a tenant holds is what the round counts: its
held reservations in this brain's ledger and the cross-brain parts that count against its
quota here (`running_work.held_usage`, the claims being taken left out).

`CohortQuotas.take_parts` does the same for cross-brain parts (`ledger_store.take_many`, as
the national brain prepares them here): only the parts that count against their tenant's
quota here (the source region's part of a cross-region request) are held to the cohorts, so
a tenant's cross-region requests use its cohort quota in its own region as its requests
placed there do.

Concurrency: the take locks the quota rows of every member of those cohorts with the
claims' own (one locking read, in the ledger's lock order), and they stay locked until the
transaction ends. Every reservation locks its tenant's quota row, so no member of the cohort
takes a reservation between the check and the commit: two placements that would together go
over the quota take turns, and the second sees the first's holdings.

Cost: one query per call (the cohorts of the claims' tenants); for tenants in no cohort,
nothing else is read or locked, and `CohortQuotas` reads nothing for a tenant it found in no
cohort less than `NO_COHORT_S` ago.
"""

import time
from collections.abc import Awaitable, Callable, Collection, Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from cnbrain.ledger.claim import Claim, FlowHold
from cnbrain.scheduling.resources import Resources
from cnbrain.storage import fair_shares, ledger_store
from cnbrain.storage.errors import CohortQuotaExceeded
from cnbrain.storage.running_work import demand_of, held_usage

NO_COHORT_S = 1.0
"""How long `CohortQuotas` takes a tenant found in no cohort to be in none."""

MAX_REMEMBERED = 100_000
"""Tenants `CohortQuotas` remembers at most (past that it starts afresh)."""


Take = Callable[[AsyncSession, Sequence[Claim], Collection[str]], Awaitable[None]]
"""Takes claims in the caller's transaction, locking the quota rows of the tenants given too."""


def _reserving(flows: Sequence[FlowHold] = ()) -> Take:
    """Takes claims with `ledger_store.reserve_many`, with `flows`."""

    async def reserve(
        session: AsyncSession, claims: Sequence[Claim], lock: Collection[str]
    ) -> None:
        await ledger_store.reserve_many(session, claims=claims, flows=flows, lock_tenants=lock)

    return reserve


def _taking_parts(flows: Sequence[FlowHold]) -> Take:
    """Takes cross-brain parts with `ledger_store.take_many`, with their `flows`."""

    async def take_parts(
        session: AsyncSession, claims: Sequence[Claim], lock: Collection[str]
    ) -> None:
        await ledger_store.take_many(session, claims=claims, flows=flows, lock_tenants=lock)

    return take_parts


class CohortQuotas:
    """`reserve_within_cohorts`, and the same for cross-brain parts (`take_parts`),
    remembering for `NO_COHORT_S` the tenants they found in no cohort, so that their next
    batches read nothing more than the ledger's own take does. `forget` drops what it
    remembers (after a change of fair shares in this brain); a change made on another
    replica holds here within `NO_COHORT_S`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._no_cohort_until: dict[str, float] = {}

    def forget(self) -> None:
        self._no_cohort_until.clear()

    async def reserve(self, session: AsyncSession, *, claims: Sequence[Claim]) -> None:
        """`reserve_within_cohorts` of `claims`, skipping the tenants known to be in no
        cohort."""
        await self._within(session, claims, _reserving(), claims)

    async def take_parts(
        self, session: AsyncSession, claims: Sequence[Claim], flows: Sequence[FlowHold] = ()
    ) -> None:
        """Take cross-brain parts `claims`, with their `flows`, with `ledger_store.take_many`
        and hold those that count against their tenant's quota here to the cohorts' quotas,
        as `reserve_within_cohorts` does (module docstring), skipping the tenants known to be
        in no cohort: the `peer_ledger.Take` of this brain's LedgerService."""
        held = [c for c in claims if c.counts_quota]
        await self._within(session, claims, _taking_parts(flows), held)

    async def _within(
        self, session: AsyncSession, claims: Sequence[Claim], take: Take, held: Sequence[Claim]
    ) -> None:
        now = self._clock()
        known = {
            claim.tenant_id
            for claim in held
            if self._no_cohort_until.get(claim.tenant_id, 0.0) > now
        }
        none = await _within_cohorts(session, claims, held=held, take=take, no_cohort=known)
        if len(self._no_cohort_until) + len(none) > MAX_REMEMBERED:
            self._no_cohort_until.clear()
        for tenant in none:
            self._no_cohort_until[tenant] = now + NO_COHORT_S


async def reserve_within_cohorts(
    session: AsyncSession,
    *,
    claims: Sequence[Claim],
    flows: Sequence[FlowHold] = (),
    no_cohort: Collection[str] = (),
) -> set[str]:
    """Take `claims` with `ledger_store.reserve_many` (with their `flows`) in the caller's
    transaction and hold them to their tenants' cohort quotas (module docstring); the
    tenants of `no_cohort` are taken to be in none (not read). Returns the tenants it read
    and found in no cohort. Raises what `reserve_many` raises, or `CohortQuotaExceeded` with
    the reason of every claim refused, by request id (the caller rolls back)."""

    async def reserve(
        session: AsyncSession, claims: Sequence[Claim], lock: Collection[str]
    ) -> None:
        await ledger_store.reserve_many(session, claims=claims, flows=flows, lock_tenants=lock)

    return await _within_cohorts(session, claims, held=claims, take=reserve, no_cohort=no_cohort)


async def _within_cohorts(
    session: AsyncSession,
    claims: Sequence[Claim],
    *,
    held: Sequence[Claim],
    take: Take,
    no_cohort: Collection[str],
) -> set[str]:
    """Take `claims` with `take` and hold the claims of `held` (some of `claims`) to their
    tenants' cohort quotas; the tenants it read and found in no cohort."""
    tenants = {claim.tenant_id for claim in held} - set(no_cohort)
    if not tenants:
        await take(session, claims, ())
        return set()
    terms = await fair_shares.cohorts_of(session, tenants)
    in_cohort = {t: terms.cohort_of[t] for t in tenants if t in terms.cohort_of}
    if not in_cohort:
        await take(session, claims, ())
        return tenants
    members = {m for name in set(in_cohort.values()) for m in terms.cohorts[name].members}
    await take(session, claims, members)
    usage = await held_usage(session, members, excluding={c.reservation_id for c in claims})
    first: tuple[str, str] | None = None
    refusals: dict[str, str] = {}
    for claim in held:
        name = in_cohort.get(claim.tenant_id)
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
    return tenants - set(in_cohort)


def _demand(claim: Claim) -> Resources:
    return demand_of(
        cpu_m=claim.cpu_m,
        mem_mib=claim.mem_mib,
        storage_gib=claim.storage_gib,
        accelerator_model=claim.accelerator_model,
        accelerator_milli=claim.accelerator_milli,
    )
