"""What holding resources over their windows costs as the calendar fills: the congestion price,
and the score of the `scarcity` rule that weighs it against a site's objective and the delay.

The price of a demand at a start: for each of its parts, the job's share of the resource
(amount / capacity, times the part's length over the job's run) times
`(base ** u - 1) / (base - 1)`, with `u` the resource's load over the part's window once the
part is taken (exponential costs, as in online routing with exponential link costs); summed,
then divided by the job's compute share (each compute resource's share once, as over one
run), so that it reads as "the job's compute, priced at this load". Compute held longer than
the run (from the start of its staging) costs that much more. A resource at load 0 costs
nothing, one filled to the brim costs its whole share; a link filled by the staging of big
datasets costs as much as a site filled by training.

The score (lower is better): `OBJECTIVE_WEIGHT` times the engine's objective of the site
(its weighted, normalised cost, energy, latency and balance terms), plus the price, plus
`DELAY_WEIGHT` times the delay past the earliest start of any option, in run times. The
simulator's `scarcity` policy and the brains' planners choose by it. Pure: reads the
calendar, changes nothing.
"""

from collections.abc import Collection, Hashable
from typing import Final, TypeVar

from cnbrain.ledger.calendar import Calendar, Profile
from cnbrain.ledger.timed_demand import TimedDemand

K = TypeVar("K", bound=Hashable)

PRICE_BASE: Final = 64.0
"""The base of the exponential congestion price: a resource at load u costs
(64^u - 1) / 63 of its share: 0.11 at half load, 0.34 at 3/4, 1 when full."""

DELAY_WEIGHT: Final = 1.0
"""What a delay of one run time (start later than the earliest feasible start by the job's
duration) weighs against the congestion price of the job's compute at a full resource."""

OBJECTIVE_WEIGHT: Final = 1.0
"""What one unit of the engine's objective weighs against the congestion price."""


def _charge(
    profile: Profile, amount: int, start: int, end: int, base: float
) -> tuple[float, float]:
    """(price, share) of holding `amount` of `profile`'s resource over `[start, end)`: the
    share is amount / capacity, the price the share times `(base ** u - 1) / (base - 1)` at
    the load u over the window once it is held; both 0 for a resource of no capacity."""
    capacity = profile.capacity
    if capacity <= 0:
        return 0.0, 0.0
    share = amount / capacity
    load = min(1.0, (capacity - profile.least_free(start, end) + amount) / capacity)
    return share * (base**load - 1) / (base - 1), share


def price(
    calendar: Calendar[K],
    demand: TimedDemand[K],
    compute: Collection[K],
    start: int,
    *,
    duration: int,
    base: float = PRICE_BASE,
) -> float:
    """The congestion price of `demand` at `start` for a job of `duration` seconds whose
    compute is held on the keys `compute` (module docstring)."""
    total = 0.0
    compute_shares: dict[K, float] = {}
    for part in demand.parts:
        begin = start + part.offset
        cost, share = _charge(
            calendar.profile(part.key), part.amount, begin, begin + part.duration, base
        )
        total += cost * part.duration / duration
        if part.key in compute:
            compute_shares[part.key] = max(share, compute_shares.get(part.key, 0.0))
    compute_share = sum(compute_shares.values())
    return total / compute_share if compute_share > 0 else total


def score(
    calendar: Calendar[K],
    demand: TimedDemand[K],
    compute: Collection[K],
    start: int,
    *,
    first_start: int,
    duration: int,
    objective: float,
) -> float:
    """The `scarcity` rule's score of holding `demand` from `start` (module docstring):
    `objective` is the engine's objective of its site, `first_start` the earliest start of
    any option of the job."""
    congestion = price(calendar, demand, compute, start, duration=duration)
    return weighed(
        congestion, objective=objective, start=start, first_start=first_start, duration=duration
    )


def earliest_score(
    calendar: Calendar[K],
    demand: TimedDemand[K],
    compute: Collection[K],
    *,
    not_before: int,
    deadline: int,
    first_start: int,
    duration: int,
    objective: float,
) -> tuple[int, float] | None:
    """(start, score) of `demand` at its earliest start `s`, `not_before <= s <= deadline`
    (`TimedDemand.earliest`), scored as `score` does; None when it has no start."""
    start = demand.earliest(calendar, not_before=not_before, deadline=deadline)
    if start is None:
        return None
    return start, score(
        calendar,
        demand,
        compute,
        start,
        first_start=first_start,
        duration=duration,
        objective=objective,
    )


def weighed(
    congestion: float, *, objective: float, start: int, first_start: int, duration: int
) -> float:
    """The score of an option of price `congestion` at `start` (`score`, its price known)."""
    delay = (start - first_start) / duration
    return OBJECTIVE_WEIGHT * objective + congestion + DELAY_WEIGHT * delay
