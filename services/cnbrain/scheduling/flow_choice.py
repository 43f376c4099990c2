"""Choosing how to serve a job that moves data: which option, at which start.

Every rule looks at the same options (`flow_options`) on the same calendar and chooses among
the feasible ones, each at its earliest start within the job's deadline (`feasible`):

- `earliest`: the earliest start; ties to the better-ranked site (the engine's objective),
  then the faster rate. This is the admission planner's rule (`backfill.plan`).
- `ranked`: the best-ranked site that has a start by the deadline, at its earliest start.
- `scarcity`: the lowest `scarcity_score`: the engine's objective of the site, plus how
  loaded, over the windows the option would hold them, the resources it takes are (a
  congestion price, exponential in the load, as in online routing with exponential link
  costs), plus the delay it costs. Its candidate sites are taken afresh against the
  calendar (`candidates`), not from the empty map.

`congestion` is the price: for each part of the demand, the job's share of the resource
(amount / capacity, times the part's length over the job's run) times
`(base ** u - 1) / (base - 1)`, with `u` the resource's load over the part's window once the
part is taken; summed, then divided by the job's compute share, so that it reads as "the
job's compute, priced at this load". A resource at load 0 costs nothing, one filled to the
brim costs its whole share; a link filled by the staging of big datasets costs as much as a
site filled by training. Pure: reads the calendar, changes nothing.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.scheduling.flow_options import FlowOption

PRICE_BASE: Final = 64.0
"""The base of the exponential congestion price: a resource at load u costs
(64^u - 1) / 63 of its share: 0.11 at half load, 0.34 at 3/4, 1 when full."""

DELAY_WEIGHT: Final = 1.0
"""What a delay of one run time (start later than the earliest feasible start by the job's
duration) weighs against the congestion price of the job's compute at a full resource."""

OBJECTIVE_WEIGHT: Final = 1.0
"""What one unit of the engine's objective (its weighted, normalised cost, energy, latency
and balance terms) weighs against the congestion price."""


@dataclass(frozen=True, slots=True)
class Timed:
    """An option with its earliest start; `rank` is its place in the options given."""

    option: FlowOption
    start: int
    rank: int


def feasible(
    options: Sequence[FlowOption], calendar: Calendar[int], *, not_before: int, deadline: int
) -> list[Timed]:
    """The options that have a start by `deadline`, each at its earliest (in their order)."""
    out: list[Timed] = []
    for rank, option in enumerate(options):
        start = option.demand.earliest(calendar, not_before=not_before, deadline=deadline)
        if start is not None:
            out.append(Timed(option, start, rank))
    return out


def earliest(timed: Sequence[Timed]) -> Timed | None:
    """The earliest start; ties to the first given (module docstring)."""
    return min(timed, key=lambda t: (t.start, t.rank), default=None)


def ranked(timed: Sequence[Timed]) -> Timed | None:
    """The first site given that has a start, at its earliest start."""
    if not timed:
        return None
    site = timed[0].option.site
    return earliest([t for t in timed if t.option.site == site])


def congestion(
    calendar: Calendar[int],
    option: FlowOption,
    start: int,
    *,
    duration: int,
    base: float = PRICE_BASE,
) -> float:
    """The congestion price of `option` at `start` for a job of `duration` seconds (module
    docstring)."""
    price = 0.0
    compute_share = 0.0
    for part in option.demand.parts:
        charge, share = _charge(calendar, part.key, part.amount, part.window(start), base)
        weight = part.duration / duration
        price += charge * weight
        if part.key in option.compute:
            compute_share += share * weight
    return price / compute_share if compute_share > 0 else price


def _charge(
    calendar: Calendar[int], key: int, amount: int, window: Window, base: float
) -> tuple[float, float]:
    """(price, share) of holding `amount` of `key` over `window`: the share is amount /
    capacity, the price the share times `(base ** u - 1) / (base - 1)` at the load u over the
    window once it is held; both 0 for a resource of no capacity."""
    profile = calendar.profile(key)
    capacity = profile.capacity
    if capacity <= 0:
        return 0.0, 0.0
    share = amount / capacity
    load = min(1.0, (capacity - profile.min_free(window) + amount) / capacity)
    return share * (base**load - 1) / (base - 1), share


def scarcity_score(
    calendar: Calendar[int],
    timed: Timed,
    *,
    first_start: int,
    duration: int,
    objective: Mapping[int, float],
) -> float:
    """The `scarcity` rule's score of an option (lower is better): `OBJECTIVE_WEIGHT` times
    the engine's objective of its site (`objective`, by site; 0 for a site it lacks), plus its
    congestion price, plus `DELAY_WEIGHT` times its delay past `first_start`, in run times."""
    price = congestion(calendar, timed.option, timed.start, duration=duration)
    delay = (timed.start - first_start) / duration
    return OBJECTIVE_WEIGHT * objective.get(timed.option.site, 0.0) + price + DELAY_WEIGHT * delay


def scarcity(
    calendar: Calendar[int],
    timed: Sequence[Timed],
    *,
    duration: int,
    objective: Mapping[int, float],
) -> Timed | None:
    """The option of the lowest `scarcity_score`; ties to the earlier start, then the first
    given."""
    if not timed:
        return None
    first_start = min(t.start for t in timed)
    scored = []
    for t in timed:
        score = scarcity_score(
            calendar, t, first_start=first_start, duration=duration, objective=objective
        )
        scored.append((score, t.start, t.rank, t))
    return min(scored, key=lambda s: s[:3])[3]


def candidates(
    calendar: Calendar[int],
    eligible: Sequence[tuple[int, float]],
    compute: Sequence[tuple[int, int]],
    *,
    lead: Callable[[int], int | None],
    site_key: Callable[[int, int], int],
    start: int,
    deadline: int,
    duration: int,
    n: int | None,
) -> list[tuple[int, float]]:
    """The `n` best of the `eligible` (site, engine objective) pairs (all when `n` is None),
    best first: the Top-N taken afresh against the calendar, not the empty map.

    Each site is estimated as the `scarcity` score of the job's `compute` alone ((site
    dimension, amount) pairs; `site_key(site, dimension)` is its calendar key): its
    objective, plus the congestion price of the compute at its earliest start on the site
    within `[start + lead(site), deadline]`, plus the delay of that start. `lead(site)` is
    the least time its staging takes there (`flow_options.least_lead`), None when the site
    has no option; such a site, and one whose compute has no start by the deadline, is left
    out."""
    if n is None or len(eligible) <= n:
        return list(eligible)
    estimated = []
    for site, value in eligible:
        least = lead(site)
        if least is None:
            continue
        demand = {site_key(site, dimension): amount for dimension, amount in compute}
        begin = calendar.earliest(demand, duration, not_before=start + least, deadline=deadline)
        if begin is None:
            continue
        window = Window.of(begin, duration)
        charges = [
            _charge(calendar, key, amount, window, PRICE_BASE) for key, amount in demand.items()
        ]
        price = sum(c for c, _ in charges)
        share = sum(s for _, s in charges)
        priced = price / share if share else 0.0
        delay = DELAY_WEIGHT * (begin - start) / duration
        estimated.append((OBJECTIVE_WEIGHT * value + priced + delay, site, value))
    estimated.sort()
    return [(site, value) for _, site, value in estimated[:n]]
