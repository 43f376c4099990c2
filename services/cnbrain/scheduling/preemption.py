"""Which running work a request of a higher class may preempt to start: the victims.

A need is what one option of the preemptor lacks now: compute on the option's site (the
usual dimensions: millicores, MiB, GiB, accelerators per model) and bandwidth on the links
of the option's path (one link dimension per link, `resources.link_dimension`, in Mbps).
What a running work `w` frees for an option on site `s` is `w.frees(s)`: its compute when it
runs on `s` (compute elsewhere frees nothing there), and its bandwidth on every link it
holds, wherever it runs.

The rule, in full, for a preemptor of class value `v` that needs `need` freed:

1. Candidates are the running (or admitted) work of a class value strictly below `v` whose
   class is preemptible. Never work of the same class or a higher one, never work of a
   non-preemptible class.
2. The need is one option's, on one site `s`: together the victims free it in every
   dimension (`need.fits(sum of w.frees(s))`): the lacking compute by victims running on
   `s`, the lacking bandwidth of each link by victims holding it (on `s` or any other site).
   Dimensions `need` does not name do not count.
3. For the site, candidates are taken greedily in the order: lowest class value first, then
   most recently started, then smallest (the victim's `size`: what it frees there as a
   dominant share of the need, `resources.dominant_fraction(w.frees(s), need)`), then by
   id; a candidate that frees nothing still lacking (no compute on `s`, no bandwidth on a
   lacking link) is passed over. The greedy stops once the need is covered; a site whose
   candidates do not cover it has no set.
4. Then every victim not needed is dropped, the last taken tried first; the set left is
   minimal: no proper subset of it covers the need.
5. With the site given (`site=`: the option's), that set is the answer. Without it, every
   site a candidate runs on is tried, and of the sites with a set the one with the fewest
   victims wins; ties go to the least work lost (the sum over victims of
   `size * (now - started_at)`, time run before `now` counting from zero), then to the
   lower site id.

`choose_victims` answers the set's ids in the order taken, [] for a need of nothing, or None
when no set covers the need.

A gang that waits for nodes of a site with node pools (its site's totals hold it, its nodes
do not) needs more than its totals: `until_enough` adds candidates running on the site, the
lowest class value first, then the most recently started, then by id, until the nodes they
free hold the gang, then drops each of those added that is not needed, the last first.
"""

from collections.abc import Callable, Iterable, Iterator, Sequence
from fractions import Fraction
from itertools import groupby

from cnbrain.scheduling.checks import checked_int, checked_name, checked_number
from cnbrain.scheduling.classes import MAX_CLASS_VALUE, MIN_CLASS_VALUE
from cnbrain.scheduling.resources import Resources, dominant_fraction
from cnbrain.scheduling.work import MAX_TIME_S, RunningWork, without_unneeded


def choose_victims(
    need: Resources,
    preemptor_class_value: int,
    running: Iterable[RunningWork],
    *,
    now: float,
    site: str | None = None,
) -> list[str] | None:
    """The ids of the work to preempt so that `need` is freed for an option on `site` (on
    the best site when None), by the rule of the module docstring; [] when `need` holds
    nothing positive; None when no set of candidates frees it. Raises `Invalid` naming the
    field for a class value, a time or a site out of bounds."""
    checked_int(
        preemptor_class_value,
        field="preemptor_class_value",
        low=MIN_CLASS_VALUE,
        high=MAX_CLASS_VALUE,
    )
    at = checked_number(now, field="now", low=0, high=MAX_TIME_S)
    if site is not None:
        checked_name(site, field="site")
    wanted = need.positive_part()
    if wanted.is_zero():
        return []
    candidates = [
        work for work in running if work.preemptible and work.class_value < preemptor_class_value
    ]
    sites = [site] if site is not None else sorted({work.site for work in candidates})
    best: tuple[int, float, str] | None = None
    chosen: list[RunningWork] = []
    for one in sites:
        victims = _victims_for_site(wanted, one, candidates)
        if victims is None:
            continue
        lost = sum(
            float(_size(work, one, wanted)) * max(at - work.started_at, 0.0) for work in victims
        )
        key = (len(victims), lost, one)
        if best is None or key < best:
            best, chosen = key, victims
    if best is None:
        return None
    return [work.id for work in chosen]


NodesFreed = Callable[[str, str, frozenset[str]], bool]
"""Whether, with the work of the ids given preempted, the nodes of a site hold the gang of a
request: `(request id, site, victim ids)`."""


def until_enough(
    victims: Sequence[str],
    candidates: Iterable[RunningWork],
    site: str,
    enough: Callable[[frozenset[str]], bool],
) -> list[str] | None:
    """`victims` with candidates running on `site` added until `enough` holds of them all,
    those added that are not needed then dropped (module docstring); None when every
    candidate is not enough."""
    chosen = list(victims)
    if not enough(frozenset(chosen)):
        more = sorted(
            (w for w in candidates if w.site == site and w.id not in chosen),
            key=lambda w: (w.class_value, -w.started_at, w.id),
        )
        for work in more:
            chosen.append(work.id)
            if enough(frozenset(chosen)):
                break
        else:
            return None
    for added in reversed(chosen[len(victims) :]):
        fewer = [one for one in chosen if one != added]
        if enough(frozenset(fewer)):
            chosen = fewer
    return chosen


def _size(work: RunningWork, site: str, need: Resources) -> Fraction:
    """How big `work` is, measured in the need: what it frees for `site` as a dominant share
    of `need`."""
    return dominant_fraction(work.frees(site), need)


def _victims_for_site(
    need: Resources, site: str, candidates: list[RunningWork]
) -> list[RunningWork] | None:
    """The minimal set of `candidates` that frees `need` for an option on `site`, greedily
    (rules 3 and 4), or None when all of them do not."""
    left = need
    taken: list[RunningWork] = []
    held: dict[int, Resources] = {}
    for work, freed in _in_rule_order(need, site, candidates):
        if any(freed[dimension] > 0 for dimension in left):
            taken.append(work)
            held[id(work)] = freed
            left = (left - freed).positive_part()
            if left.is_zero():
                return without_unneeded(taken, need, lambda one: held[id(one)])
    return None


def _in_rule_order(
    need: Resources, site: str, candidates: list[RunningWork]
) -> Iterator[tuple[RunningWork, Resources]]:
    """`candidates` in the order of rule 3, each with what it frees for `site`. The size
    (and what a candidate frees) is worked out only between candidates of equal class and
    start, as the greedy reaches them: it usually stops after a few."""
    by_class_and_start = sorted(candidates, key=lambda work: (work.class_value, -work.started_at))
    for _, group in groupby(
        by_class_and_start, key=lambda work: (work.class_value, work.started_at)
    ):
        ties = [(work, work.frees(site)) for work in group]
        if len(ties) > 1:
            ties.sort(key=lambda pair: (dominant_fraction(pair[1], need), pair[0].id))
        yield from ties
