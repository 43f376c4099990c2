"""Which running work a request of a higher class may preempt to start: the victims.

The rule, in full, for a preemptor of class value `v` that needs `need` freed on one site:

1. Candidates are the running (or admitted) work of a class value strictly below `v` whose
   class is preemptible. Never work of the same class or a higher one, never work of a
   non-preemptible class.
2. The need is per site: the victims are all on one site, and together their demands cover
   `need` in every dimension (`need.fits(sum of demands)`). Dimensions `need` does not name
   do not count.
3. On each site, candidates are taken greedily in the order: lowest class value first, then
   most recently started, then smallest (the victim's `size`: its demand as a dominant share
   of the need, `resources.dominant_fraction(demand, need)`), then by id; a candidate that
   frees nothing the site still lacks is passed over. The greedy stops once the need is
   covered; a site whose candidates do not cover it has no set.
4. Then every victim not needed is dropped, the last taken tried first; the set left is
   minimal: no proper subset of it covers the need.
5. Of the sites with a set, the one with the fewest victims wins; ties go to the least work
   lost (the sum over victims of `size * (now - started_at)`, time run before `now` counting
   from zero), then to the lower site id.

`choose_victims` answers the winning set's ids in the order taken, [] for a need of nothing,
or None when no site has a set.
"""

from collections.abc import Iterable
from fractions import Fraction

from cnbrain.scheduling.checks import checked_int, checked_number
from cnbrain.scheduling.classes import MAX_CLASS_VALUE, MIN_CLASS_VALUE
from cnbrain.scheduling.resources import Resources, dominant_fraction
from cnbrain.scheduling.work import MAX_TIME_S, RunningWork, without_unneeded


def choose_victims(
    need: Resources,
    preemptor_class_value: int,
    running: Iterable[RunningWork],
    *,
    now: float,
) -> list[str] | None:
    """The ids of the work to preempt so that `need` is freed on one site, by the rule of the
    module docstring; [] when `need` holds nothing positive; None when no site can free it.
    Raises `Invalid` naming the field for a class value or a time out of bounds."""
    checked_int(
        preemptor_class_value,
        field="preemptor_class_value",
        low=MIN_CLASS_VALUE,
        high=MAX_CLASS_VALUE,
    )
    at = checked_number(now, field="now", low=0, high=MAX_TIME_S)
    wanted = need.positive_part()
    if wanted.is_zero():
        return []
    by_site: dict[str, list[RunningWork]] = {}
    for work in running:
        if work.preemptible and work.class_value < preemptor_class_value:
            by_site.setdefault(work.site, []).append(work)
    best: tuple[int, float, str] | None = None
    chosen: list[RunningWork] = []
    for site, candidates in by_site.items():
        victims = _victims_on_site(wanted, candidates)
        if victims is None:
            continue
        lost = sum(float(_size(work, wanted)) * max(at - work.started_at, 0.0) for work in victims)
        key = (len(victims), lost, site)
        if best is None or key < best:
            best, chosen = key, victims
    if best is None:
        return None
    return [work.id for work in chosen]


def _size(work: RunningWork, need: Resources) -> Fraction:
    """How big `work` is, measured in the need: its demand as a dominant share of `need`."""
    return dominant_fraction(work.demand, need)


def _victims_on_site(need: Resources, candidates: list[RunningWork]) -> list[RunningWork] | None:
    """The minimal set of `candidates` (all on one site) that covers `need`, greedily (rules
    3 and 4), or None when all of them do not."""
    ordered = sorted(
        candidates,
        key=lambda work: (work.class_value, -work.started_at, _size(work, need), work.id),
    )
    left = need
    taken: list[RunningWork] = []
    for work in ordered:
        if any(work.demand[dimension] > 0 for dimension in left):
            taken.append(work)
            left = (left - work.demand).positive_part()
            if left.is_zero():
                return without_unneeded(taken, need)
    return None
