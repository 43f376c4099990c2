"""Quotas over time: a nominal quota per tenant, and borrowing within a cohort.

A cohort is a set of tenants of one region that lend each other their idle quota. Each
member has a nominal quota (a resource vector it is always entitled to) and a borrowing limit
(how much beyond its nominal it may hold, per dimension; zero where it names none, so by
default a tenant borrows nothing).

- Admission (`Cohort.can_admit`): work whose tenant stays within its nominal in every
  dimension is admitted on its nominal. Otherwise, in each dimension where it would go beyond
  its nominal, the excess must be at most its borrowing limit and at most what the other
  members leave unused (the sum of their nominal minus their usage: their idle quota less
  what others already borrow of it). Else it is refused, the reason naming the dimension and
  the amounts.
- Borrowed use (`Cohort.borrowed`) is what a tenant holds beyond its nominal.
- Reclaim (`Cohort.reclaim`): a lender that wants to use its unused nominal again, while
  borrowers hold it, gets it back by the preemption of borrowed work: the other members'
  work, most recently started first, taken only while its tenant still holds more than its
  nominal in a dimension the lender lacks, until the cohort's unused quota covers the
  lender's need (some set always does); then any victim not needed is dropped, the last
  taken tried first, so that no proper subset of the victims would do. Borrowed work is
  reclaimable whatever its class: a class's being non-preemptible protects it from higher
  classes (`preemption.choose_victims`), never from the lender of what it borrowed.

Quotas are about entitlement, not room: whether a site has the room is the placement's and
`preemption.choose_victims`'s concern.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from cnbrain.domain.errors import Internal, Invalid, NotFound
from cnbrain.scheduling.checks import checked_name
from cnbrain.scheduling.resources import Resources
from cnbrain.scheduling.work import RunningWork, usage_by_tenant, without_unneeded

Verdict = Literal["nominal", "borrowing", "refused"]


@dataclass(frozen=True, slots=True)
class TenantQuota:
    """A member's `nominal` quota and `borrowing_limit` beyond it. Raises `Invalid` naming
    the field when either holds a negative amount."""

    nominal: Resources
    borrowing_limit: Resources = field(default_factory=Resources)

    def __post_init__(self) -> None:
        for name in ("nominal", "borrowing_limit"):
            vector = getattr(self, name)
            if not isinstance(vector, Resources):
                raise Invalid("must be a resource vector", field=name)
            if not vector.is_nonnegative():
                raise Invalid(f"must not be negative: {dict(vector.amounts)}", field=name)


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer of `Cohort.can_admit`: `nominal` (within the tenant's own quota),
    `borrowing` (`borrowed` is what the tenant would then hold beyond its nominal) or
    `refused` (`reason` says which dimension, how much and which limit)."""

    verdict: Verdict
    borrowed: Resources = field(default_factory=Resources)
    reason: str | None = None

    @property
    def admitted(self) -> bool:
        return self.verdict != "refused"


class Cohort:
    """The members of one cohort and their quotas (module docstring). Raises `Invalid` for a
    name that is not a name, or a cohort without members."""

    __slots__ = ("_quotas", "name")

    def __init__(self, name: str, quotas: Mapping[str, TenantQuota]) -> None:
        self.name = checked_name(name, field="name")
        for tenant in quotas:
            checked_name(tenant, field="quotas")
        if not quotas:
            raise Invalid("a cohort needs at least one member", field="quotas")
        self._quotas = dict(quotas)

    @property
    def members(self) -> tuple[str, ...]:
        return tuple(self._quotas)

    def quota(self, tenant: str) -> TenantQuota:
        """`tenant`'s quota. Raises `NotFound` for a tenant not in the cohort."""
        found = self._quotas.get(tenant)
        if found is None:
            raise NotFound(f"tenant {tenant!r} is not a member of cohort {self.name!r}")
        return found

    def borrowed(self, tenant: str, usage: Resources) -> Resources:
        """What `tenant`, holding `usage`, holds beyond its nominal quota."""
        return (usage - self.quota(tenant).nominal).positive_part()

    def can_admit(
        self, tenant: str, demand: Resources, usage_by_tenant: Mapping[str, Resources]
    ) -> Admission:
        """Whether `tenant` may add `demand` to its usage, with every member's current usage
        in `usage_by_tenant` (absent: nothing; non-members are ignored). Raises `NotFound`
        for a tenant not in the cohort and `Invalid` (field `demand`) for a negative demand."""
        quota = self.quota(tenant)
        if not demand.is_nonnegative():
            raise Invalid(f"must not be negative: {dict(demand.amounts)}", field="demand")
        after = usage_by_tenant.get(tenant, Resources()) + demand
        excess = (after - quota.nominal).positive_part()
        if excess.is_zero():
            return Admission("nominal")
        unused = self._unused(usage_by_tenant, excluding=tenant)
        refusals: list[str] = []
        for dimension in excess:
            over = excess[dimension]
            beyond = (
                f"{dimension}: tenant {tenant!r} would hold {after[dimension]}, {over} beyond "
                f"its nominal {quota.nominal[dimension]}"
            )
            limit = quota.borrowing_limit[dimension]
            if over > limit:
                refusals.append(f"{beyond}, but may borrow at most {limit}")
            elif over > unused[dimension]:
                lendable = max(unused[dimension], 0)
                refusals.append(f"{beyond}, but the cohort's other members leave {lendable} unused")
        if refusals:
            return Admission("refused", reason="; ".join(refusals))
        return Admission("borrowing", borrowed=excess)

    def reclaim(self, lender: str, need: Resources, running: Iterable[RunningWork]) -> list[str]:
        """The ids of borrowed running work to preempt so that `lender` may add `need` to its
        usage within its nominal (module docstring), in the order taken; [] when the cohort's
        unused quota already covers it. `running` is all running work; that of non-members is
        ignored. Raises `NotFound` for a lender not in the cohort and `Invalid` (field `need`)
        for a need beyond the lender's unused nominal: that part would be borrowing.

        Some set always suffices: in each dimension, what the lender lacks is at most what the
        others hold beyond their nominal, and their work is taken until they hold no more."""
        quota = self.quota(lender)
        members = [work for work in running if work.tenant in self._quotas]
        held = usage_by_tenant(members)
        asked = need.positive_part()
        own_unused = (quota.nominal - held.get(lender, Resources())).positive_part()
        if not asked.fits(own_unused):
            raise Invalid(
                f"{dict(asked.amounts)} is beyond the lender's unused nominal "
                f"{dict(own_unused.amounts)}",
                field="need",
            )
        unused = self._unused(held, excluding=None)
        shortfall = Resources({d: asked[d] - unused[d] for d in asked}).positive_part()
        if shortfall.is_zero():
            return []
        taken = self._take_borrowed(lender, shortfall, members, held)
        return [work.id for work in without_unneeded(taken, shortfall)]

    def _take_borrowed(
        self,
        lender: str,
        shortfall: Resources,
        members: list[RunningWork],
        held: dict[str, Resources],
    ) -> list[RunningWork]:
        """Borrowed work, most recently started first, until it covers `shortfall`."""
        candidates = sorted(
            (work for work in members if work.tenant != lender),
            key=lambda work: (-work.started_at, work.id),
        )
        left = shortfall
        taken: list[RunningWork] = []
        for work in candidates:
            nominal = self._quotas[work.tenant].nominal
            usage = held[work.tenant]
            if any(work.demand[d] > 0 and usage[d] > nominal[d] for d in left):
                taken.append(work)
                held[work.tenant] = usage - work.demand
                left = (left - work.demand).positive_part()
                if left.is_zero():
                    return taken
        raise Internal(f"the borrowed work does not cover {dict(left.amounts)}")

    def _unused(self, usage: Mapping[str, Resources], *, excluding: str | None) -> Resources:
        """The members' nominal quota less their usage, summed (may be negative where the
        nominal quotas shrank below the usage)."""
        unused = Resources()
        for tenant, quota in self._quotas.items():
            if tenant != excluding:
                unused = unused + quota.nominal - usage.get(tenant, Resources())
        return unused
