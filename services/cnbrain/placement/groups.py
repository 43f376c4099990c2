"""Groups of related requests: placed together (one site, or one province) or spread (each
on a site of its own), all of them or none.

`place_group` decides a group on a snapshot, reserving nothing; the caller takes every
member's reservation at once (all or none). A group that cannot be placed as asked gets a
rejection for every member, naming the group.

- **together**: the candidate sites (or provinces) are those every member can use (each
  passes every filter there and fits the site's free capacity on its own); they are tried
  best first by the members' summed scores, and the first on which the members fit together
  (one batch on that site or province alone, so they never count on the same capacity or
  nodes) wins. At most `TRIES` candidates are tried.
- **spread**: the members are placed in order, each on the snapshot less what the earlier
  ones took and without the sites they took, so no two share a site (a service's replicas).
"""

from collections.abc import Sequence
from typing import Final, Literal

import numpy as np

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.registry import DEFAULT_STRATEGY

Placement = Literal["together", "spread"]
Scope = Literal["site", "province"]

TRIES: Final = 8
"""Candidate sites or provinces a group placed together tries before it is rejected."""


def place_group(
    engine: PlacementEngine,
    requests: Sequence[PlacementRequest],
    *,
    placement: Placement,
    scope: Scope = "site",
    snapshot: Snapshot,
    group_id: str,
    policy: str = DEFAULT_STRATEGY,
) -> list[Decision]:
    """One decision per member of the group, in order: all placed, or all rejected with the
    reason (module docstring). Nothing is reserved."""
    if placement == "spread":
        decisions = _spread(engine, requests, snapshot=snapshot, policy=policy)
    else:
        decisions = _together(engine, requests, snapshot=snapshot, scope=scope, policy=policy)
    if isinstance(decisions, str):
        return _rejected(requests, f"group {group_id!r}: {decisions}", policy)
    return decisions


def _together(
    engine: PlacementEngine,
    requests: Sequence[PlacementRequest],
    *,
    snapshot: Snapshot,
    scope: Scope,
    policy: str,
) -> list[Decision] | str:
    """The members' decisions on the first candidate that takes them all, or why none does."""
    arrays = engine.arrays
    ranked = engine.rank_sites_many(requests, snapshot=snapshot, n=arrays.n_sites)
    total: dict[int, float] = {}
    for i, (sites, reason) in enumerate(ranked):
        if not sites:
            return f"request {requests[i].id!r} fits no site: {reason}"
        scores = dict(sites)
        total = scores if i == 0 else {s: v + scores[s] for s, v in total.items() if s in scores}
    if scope == "province":
        by_province: dict[int, float] = {}
        for site, value in total.items():
            province = int(arrays.site_province[site])
            by_province[province] = min(by_province.get(province, value), value)
        order = sorted(by_province, key=lambda p: (by_province[p], p))[:TRIES]
        masks = [arrays.site_province == province for province in order]
        where = "province"
    else:
        order = sorted(total, key=lambda s: (total[s], s))[:TRIES]
        masks = [np.arange(arrays.n_sites) == site for site in order]
        where = "site"
    if not order:
        return f"no {where} can take every member"
    for mask in masks:
        decisions = engine.place_batch(
            requests, policy=policy, reserve=False, snapshot=snapshot.restricted(sites=mask)
        )
        if all(d.status is DecisionStatus.PLACED for d in decisions):
            return decisions
    return f"the members do not fit together on any of the {len(order)} best {where}s for them"


def _spread(
    engine: PlacementEngine,
    requests: Sequence[PlacementRequest],
    *,
    snapshot: Snapshot,
    policy: str,
) -> list[Decision] | str:
    """The members' decisions, each on a site of its own, or why one cannot have one."""
    arrays = engine.arrays
    free = np.ones(arrays.n_sites, dtype=bool)
    decisions: list[Decision] = []
    for request in requests:
        [decision] = engine.place_batch(
            [request], policy=policy, reserve=False, snapshot=snapshot.restricted(sites=free)
        )
        if decision.status is not DecisionStatus.PLACED or decision.site is None:
            return f"request {request.id!r} has no site of its own: {decision.reason}"
        decisions.append(decision)
        site = arrays.map.site_index[decision.site]
        free[site] = False
        snapshot = snapshot.adjusted(engine.reservation_for(request, decision), taken=True)
    return decisions


def _rejected(requests: Sequence[PlacementRequest], reason: str, policy: str) -> list[Decision]:
    return [
        Decision(request_id=r.id, status=DecisionStatus.REJECTED, policy=policy, reason=reason)
        for r in requests
    ]
