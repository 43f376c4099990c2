"""Choosing how to serve a job that moves data: which option, at which start.

Every rule looks at the same options (`flow_options`) on the same calendar and chooses among
the feasible ones, each at its earliest start within the job's deadline (`feasible`):

- `earliest`: the earliest start; ties to the better-ranked site (the engine's objective),
  then the faster rate. This is the admission planner's rule for work without flows
  (`backfill.plan`).
- `ranked`: the best-ranked site that has a start by the deadline, at its earliest start.
- `scarcity`: the lowest `scarcity_score`: the engine's objective of the site, plus how
  loaded, over the windows the option would hold them, the resources it takes are (a
  congestion price, exponential in the load, as in online routing with exponential link
  costs), plus the delay it costs. Its candidate sites are taken afresh against the
  calendar (`candidates`), not from the empty map. The brains' planners choose requests
  with flows by the same score (`backfill.choose`).

The price and the score are `congestion`'s. Pure: reads the calendar, changes nothing.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cnbrain.ledger.calendar import Calendar
from cnbrain.ledger.timed_demand import Part, TimedDemand
from cnbrain.scheduling import congestion
from cnbrain.scheduling.flow_options import FlowOption


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


def scarcity_score(
    calendar: Calendar[int],
    timed: Timed,
    *,
    first_start: int,
    duration: int,
    objective: Mapping[int, float],
) -> float:
    """The `scarcity` rule's score of an option (`congestion.score`; lower is better), with
    the engine's objective of its site from `objective` (by site; 0 for a site it lacks)."""
    option = timed.option
    return congestion.score(
        calendar,
        option.demand,
        option.compute,
        timed.start,
        first_start=first_start,
        duration=duration,
        objective=objective.get(option.site, 0.0),
    )


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
        held = TimedDemand(Part(key, amount, 0, duration) for key, amount in demand.items())
        found = congestion.earliest_score(
            calendar,
            held,
            demand,
            not_before=start + least,
            deadline=deadline,
            first_start=start,
            duration=duration,
            objective=value,
        )
        if found is not None:
            estimated.append((found[1], site, value))
    estimated.sort()
    return [(site, value) for _, site, value in estimated[:n]]
