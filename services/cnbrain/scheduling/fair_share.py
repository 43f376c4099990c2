"""The order of waiting work: by class, then weighted fair shares between tenants, then age.

The rule, in full:

1. Higher class value first: every request of a higher class comes before every request of
   a lower one.
2. Within a class, weighted dominant resource fairness (DRF) between tenants: a tenant's
   dominant share is the largest fraction of the region's capacity it holds in any dimension
   (`resources.dominant_fraction`); the tenant with the lowest share divided by its weight
   (default 1) goes next. After each pick, the picked request's demand is added to its
   tenant's usage, as if admitted, so the next pick sees the larger share: a tenant with many
   requests takes its weighted part of the order, not every slot. The usage so added carries
   over to the lower classes.
3. Between tenants of equal weighted share (compared exactly, as fractions), the one whose
   next request is older goes first; then the lower request id.
4. A tenant's own requests come oldest first, then by id.

`fair_order` costs O(n log n) for n requests: one heap of tenants per class.
"""

import heapq
from collections.abc import Iterable, Mapping
from fractions import Fraction

from cnbrain.domain import bounds
from cnbrain.domain.errors import Invalid
from cnbrain.scheduling.checks import checked_number
from cnbrain.scheduling.classes import PriorityClasses
from cnbrain.scheduling.resources import Resources
from cnbrain.scheduling.work import QueuedWork

DEFAULT_WEIGHT = 1.0
"""The weight of a tenant the weights do not name."""


def fair_order(
    queued: Iterable[QueuedWork],
    *,
    classes: PriorityClasses,
    usage: Mapping[str, Resources],
    capacity: Resources,
    weights: Mapping[str, float] | None = None,
) -> list[QueuedWork]:
    """The requests of `queued` in the order they are to be admitted (module docstring).

    `usage` is what each tenant holds in the region now (absent: nothing), `capacity` the
    region's capacity, `weights` each tenant's weight (absent: `DEFAULT_WEIGHT`). Raises
    `Invalid` naming the field for a class no class of `classes` has, a request id given
    twice, or a weight that is not positive, finite and at most `bounds.MAX_WEIGHT`."""
    weight_of = _checked_weights(weights or {})
    by_class: dict[int, dict[str, list[QueuedWork]]] = {}
    seen: set[str] = set()
    for index, work in enumerate(queued):
        if work.id in seen:
            raise Invalid(f"request {work.id!r} is queued twice", field=f"queued[{index}].id")
        seen.add(work.id)
        value = classes.get(work.class_name).value
        by_class.setdefault(value, {}).setdefault(work.tenant, []).append(work)
    held = {tenant: dict(amounts.amounts) for tenant, amounts in usage.items()}
    totals = {d: total for d, total in capacity.amounts.items() if total > 0}
    order: list[QueuedWork] = []
    for value in sorted(by_class, reverse=True):
        order.extend(_drf_order(by_class[value], held, totals, weight_of))
    return order


def _checked_weights(weights: Mapping[str, float]) -> dict[str, Fraction]:
    checked: dict[str, Fraction] = {}
    for tenant, weight in weights.items():
        number = checked_number(
            weight, field=f"weights.{tenant}", low=0.0, high=float(bounds.MAX_WEIGHT)
        )
        if number <= 0:
            raise Invalid("must be positive", field=f"weights.{tenant}")
        checked[tenant] = Fraction(number)
    return checked


class _Share:
    """A tenant's usage as the order grows it, and its dominant share of the region's
    capacity (`resources.dominant_fraction`), kept as it grows: adding a demand can only
    raise the share, in the dimensions the demand names."""

    __slots__ = ("_best", "_of", "_totals", "used")

    def __init__(self, used: dict[str, int], totals: Mapping[str, int]) -> None:
        self.used, self._totals = used, totals
        self._best, self._of = 0, 1
        self._raise(used)

    def add(self, demand: Resources) -> None:
        used = self.used
        for dimension, amount in demand.amounts.items():
            used[dimension] = used.get(dimension, 0) + amount
        self._raise({d: used[d] for d in demand.amounts})

    def weighted(self, weight: Fraction) -> "_Ratio":
        """The dominant share divided by `weight`, exactly."""
        return _Ratio(self._best * weight.denominator, self._of * weight.numerator)

    def _raise(self, amounts: Mapping[str, int]) -> None:
        for dimension, amount in amounts.items():
            total = self._totals.get(dimension, 0)
            if total and amount * self._of > self._best * total:
                self._best, self._of = amount, total


class _Ratio:
    """The ratio `n / d` (`d > 0`), compared exactly (cross-multiplied). A heap key puts its
    float first (`key`): integer division rounds correctly, so unequal floats order as the
    ratios do, and only between equal floats are the ratios compared."""

    __slots__ = ("_d", "_n")

    def __init__(self, n: int, d: int) -> None:
        self._n, self._d = n, d

    def key(self) -> "tuple[float, _Ratio]":
        return self._n / self._d, self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Ratio):
            return NotImplemented
        return self._n * other._d == other._n * self._d

    def __lt__(self, other: "_Ratio") -> bool:
        return self._n * other._d < other._n * self._d


def _drf_order(
    by_tenant: dict[str, list[QueuedWork]],
    held: dict[str, dict[str, int]],
    totals: Mapping[str, int],
    weight_of: Mapping[str, Fraction],
) -> list[QueuedWork]:
    """One class's requests in weighted DRF order; adds each pick's demand to `held` (per
    tenant, the amount per dimension); `totals` is the capacity per dimension (positive)."""
    default = Fraction(DEFAULT_WEIGHT)
    heap: list[tuple[tuple[float, _Ratio], float, str, str, int]] = []
    shares = {tenant: _Share(held.setdefault(tenant, {}), totals) for tenant in by_tenant}

    def push(tenant: str, position: int) -> None:
        head = by_tenant[tenant][position]
        weighted = shares[tenant].weighted(weight_of.get(tenant, default)).key()
        heapq.heappush(heap, (weighted, head.submitted_at, head.id, tenant, position))

    for tenant, works in by_tenant.items():
        works.sort(key=lambda work: (work.submitted_at, work.id))
        push(tenant, 0)
    order: list[QueuedWork] = []
    while heap:
        _, _, _, tenant, position = heapq.heappop(heap)
        work = by_tenant[tenant][position]
        order.append(work)
        shares[tenant].add(work.demand)
        if position + 1 < len(by_tenant[tenant]):
            push(tenant, position + 1)
    return order
