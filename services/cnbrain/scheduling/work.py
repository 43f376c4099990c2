"""The two kinds of work the scheduling rules weigh: waiting in the queue, and running.

Times are seconds on one clock (the brain's wall clock, as the database stores them).
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from cnbrain.domain.errors import Invalid
from cnbrain.scheduling.checks import checked_int, checked_name, checked_number
from cnbrain.scheduling.classes import MAX_CLASS_VALUE, MIN_CLASS_VALUE
from cnbrain.scheduling.resources import Resources, is_link_dimension

MAX_TIME_S: Final = 10.0**12
"""A time is within [0, MAX_TIME_S] seconds (beyond the year 30000 since the epoch)."""


def _checked_demand(demand: object, *, field: str = "demand") -> Resources:
    if not isinstance(demand, Resources):
        raise Invalid("must be a resource vector", field=field)
    if not demand.is_nonnegative():
        raise Invalid(f"must not be negative: {dict(demand.amounts)}", field=field)
    return demand


def _checked_compute(demand: object) -> None:
    """A demand of compute: no link dimension (bandwidth is held apart, per link)."""
    links = [d for d in _checked_demand(demand) if is_link_dimension(d)]
    if links:
        raise Invalid(f"must hold no link's bandwidth, not {links}", field="demand")


def _checked_bandwidth(bandwidth: object) -> None:
    """Bandwidth: link dimensions only (`resources.link_dimension`), none negative."""
    others = [d for d in _checked_demand(bandwidth, field="bandwidth") if not is_link_dimension(d)]
    if others:
        raise Invalid(f"must name links only, not {others}", field="bandwidth")


@dataclass(frozen=True, slots=True)
class QueuedWork:
    """A request waiting to be admitted: `tenant` asked for `demand` in class `class_name`
    at `submitted_at`. Raises `Invalid` naming the field for a bad name, a negative demand or
    a time outside [0, MAX_TIME_S]."""

    id: str
    tenant: str
    class_name: str
    demand: Resources
    submitted_at: float

    def __post_init__(self) -> None:
        checked_name(self.id, field="id")
        checked_name(self.tenant, field="tenant")
        checked_name(self.class_name, field="class_name")
        _checked_compute(self.demand)
        at = checked_number(self.submitted_at, field="submitted_at", low=0, high=MAX_TIME_S)
        object.__setattr__(self, "submitted_at", at)


@dataclass(frozen=True, slots=True)
class RunningWork:
    """Work that holds `demand` (compute) on `site` and `bandwidth` on the links of its path
    (Mbps per link, over link dimensions: `Resources.bandwidth`; none when it holds no
    bandwidth): running, or admitted and about to start, since `started_at` (its admission
    time when it has not started). `class_value` is its priority class's value; only
    `preemptible` work may be preempted. Raises `Invalid` naming the field for a bad name,
    value, demand (negative, or naming a link), bandwidth (negative, or naming other than
    links) or time."""

    id: str
    tenant: str
    class_value: int
    preemptible: bool
    started_at: float
    demand: Resources
    site: str
    bandwidth: Resources = field(default_factory=Resources)

    def __post_init__(self) -> None:
        checked_name(self.id, field="id")
        checked_name(self.tenant, field="tenant")
        checked_int(
            self.class_value, field="class_value", low=MIN_CLASS_VALUE, high=MAX_CLASS_VALUE
        )
        if not isinstance(self.preemptible, bool):
            raise Invalid("must be a boolean", field="preemptible")
        at = checked_number(self.started_at, field="started_at", low=0, high=MAX_TIME_S)
        object.__setattr__(self, "started_at", at)
        _checked_compute(self.demand)
        checked_name(self.site, field="site")
        _checked_bandwidth(self.bandwidth)

    def frees(self, site: str) -> Resources:
        """What preempting it frees for work that would run on `site`: its compute when it
        runs on `site` (none elsewhere: compute is per site), and its bandwidth on every
        link it holds, wherever it runs."""
        if self.site != site:
            return self.bandwidth
        return self.demand + self.bandwidth if self.bandwidth.amounts else self.demand


def usage_by_tenant(running: Iterable[RunningWork]) -> dict[str, Resources]:
    """What each tenant's running work holds, summed over its work."""
    usage: dict[str, Resources] = {}
    for work in running:
        usage[work.tenant] = usage.get(work.tenant, Resources()) + work.demand
    return usage


def total_demand(works: Iterable[RunningWork]) -> Resources:
    """The demands of `works`, summed."""
    total = Resources()
    for work in works:
        total = total + work.demand
    return total


def without_unneeded(
    taken: list[RunningWork],
    need: Resources,
    held: Callable[[RunningWork], Resources] | None = None,
) -> list[RunningWork]:
    """`taken` without the work whose removal still leaves `need` covered by what the rest
    holds (`held(work)`; its demand by default), the last taken tried first. Covering is
    monotone (more work covers more), so the result is minimal: no proper subset of it
    covers `need`."""
    amount = held or (lambda work: work.demand)
    kept = list(taken)
    for work in reversed(taken):
        rest = [other for other in kept if other is not work]
        if need.fits(sum((amount(other) for other in rest), Resources())):
            kept = rest
    return kept
