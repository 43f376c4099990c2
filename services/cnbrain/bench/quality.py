"""The gap between a policy's objective and the exact model's, request by request.

Requests arrive one at a time on one ledger. For each, both the policy and the exact model
quote a decision on the same snapshot (nothing reserved); then the policy's choice is
reserved, so the ledger fills as it would in service. The gap of a request is
(policy objective - exact objective) / |exact objective|; a request the exact model places
and the policy rejects counts as a miss (an infinite gap).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cnbrain.domain.decision import DecisionStatus
from cnbrain.domain.request import PlacementRequest
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine


@dataclass(frozen=True, slots=True)
class GapFigures:
    compared: int
    within_1pct_share: float
    exact_matches_share: float
    p50: float
    p95: float
    max: float
    misses: int


def objective_gaps(
    cmap: ComputeNetworkMap, policy: str, *, requests: Sequence[PlacementRequest]
) -> GapFigures:
    engine = PlacementEngine(cmap)
    gaps: list[float] = []
    for request in requests:
        exact = engine.place(request, policy="exact", reserve=False)
        if exact.status is not DecisionStatus.PLACED or exact.outcome is None:
            continue
        ours = engine.place(request, policy=policy, reserve=True)
        if ours.outcome is None:
            gaps.append(math.inf)
            continue
        reference = abs(exact.outcome.objective) or 1.0
        gaps.append((ours.outcome.objective - exact.outcome.objective) / reference)
    values = np.asarray(gaps) if gaps else np.zeros(1)
    finite = values[np.isfinite(values)]
    return GapFigures(
        compared=len(gaps),
        within_1pct_share=float(np.mean(values <= 0.01)),
        exact_matches_share=float(np.mean(np.abs(values) <= 1e-6)),
        p50=float(np.percentile(finite, 50)) if len(finite) else math.nan,
        p95=float(np.percentile(finite, 95)) if len(finite) else math.nan,
        max=float(finite.max()) if len(finite) else math.nan,
        misses=int(np.sum(~np.isfinite(values))),
    )
