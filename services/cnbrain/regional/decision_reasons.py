"""The reason of a decision as a metric's label: a few fixed words, never the free text of
the decision's reason (which names sites, amounts and tenants).

- `placed`: `local` (a site of the request's own province) or `across_provinces`;
- `queued`: `waiting` (it asked to wait in the admission queue);
- `rejected`: the filter plugin that rejected the last sites standing, the last in the
  pipeline's order to reject any (`capacity`, `accelerator_model`, ... of
  `placement.registry.FILTERS`; `filter` for another); `no_route` (sites fit but no path
  does); `quota` (a site and path fit, the tenant's or its cohort's quota did not);
  `federation` (the federation rejected it without an engine's decision: no region
  answered or could hold its part, or the national brain could not be asked; when the
  national brain's engine found no site, the filter that excluded the last sites, as for a
  region's own);
  `steering` (a site and path fit, the data plane could not steer the path);
  `contention` (capacity kept changing over every attempt);
- `failed`: `error`.

Anything else is `other`.
"""

from typing import Final

from cnbrain.domain.decision import (
    FEDERATION_POLICY,
    STEERING_REASON,
    Decision,
    DecisionStatus,
    SegmentKind,
)
from cnbrain.domain.states import RequestState
from cnbrain.placement.registry import FILTERS

REASONS: Final = frozenset(
    {
        "local",
        "across_provinces",
        "waiting",
        "filter",
        "no_route",
        "quota",
        "federation",
        "steering",
        "contention",
        "error",
        "other",
        *FILTERS,
    }
)
"""Every reason `reason_of` gives."""


def reason_of(state: str, decision: Decision | None) -> str:
    """The reason (module docstring) of a request in `state` decided by `decision`."""
    if state == RequestState.PLACED:
        if decision is None or decision.path is None:
            return "other"
        local = all(s.kind is SegmentKind.LOCAL for s in decision.path.segments)
        return "local" if local else "across_provinces"
    if state == RequestState.QUEUED:
        return "waiting"
    if state == RequestState.FAILED:
        return "error"
    if state != RequestState.REJECTED:
        return "other"
    return _rejection(decision)


def _rejection(decision: Decision | None) -> str:
    if decision is None:
        return "contention"
    if decision.policy == FEDERATION_POLICY:
        return "federation"
    if decision.status is DecisionStatus.REJECTED and decision.reason == STEERING_REASON:
        return "steering"
    if decision.status is DecisionStatus.REJECTED and decision.site is not None:
        return "quota"
    explanation = decision.explanation
    if explanation is None:
        return "other"
    if explanation.sites_feasible == 0 and explanation.rejections:
        plugin = explanation.rejections[-1].plugin
        return plugin if plugin in FILTERS else "filter"
    return "no_route"
