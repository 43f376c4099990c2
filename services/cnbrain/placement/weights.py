"""The operator's weight matrix: a multiplier per workload class and objective term.

The weight a decision uses for a term is the request's own weight times this multiplier, so
operators steer classes (say, training towards green sites) without editing requests.
"""

import hashlib
import json
from collections.abc import Mapping
from types import MappingProxyType

from pydantic import Field

from cnbrain.domain.enums import OBJECTIVES, Objective, WorkloadClass
from cnbrain.domain.model import DomainModel
from cnbrain.domain.request import ObjectiveWeights

DEFAULT_MATRIX: Mapping[WorkloadClass, ObjectiveWeights] = MappingProxyType(
    {
        WorkloadClass.TRAINING: ObjectiveWeights(cost=1.0, latency=0.25, energy=1.5, balance=1.0),
        WorkloadClass.INFERENCE: ObjectiveWeights(cost=1.0, latency=2.0, energy=0.75, balance=1.0),
        WorkloadClass.BATCH: ObjectiveWeights(cost=1.5, latency=0.25, energy=1.0, balance=1.0),
        WorkloadClass.SERVICE: ObjectiveWeights(cost=1.0, latency=1.5, energy=1.0, balance=1.25),
    }
)


class WeightMatrix(DomainModel):
    rows: dict[WorkloadClass, ObjectiveWeights] = Field(
        default_factory=lambda: dict(DEFAULT_MATRIX)
    )

    def digest(self) -> str:
        """A digest of the matrix: equal matrices, equal digests."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def effective(
        self, workload_class: WorkloadClass, weights: ObjectiveWeights
    ) -> tuple[float, ...]:
        """The request's weights times this matrix's row, in `OBJECTIVES` order."""
        row = self.rows.get(workload_class, ObjectiveWeights())
        return tuple(weights.of(o) * row.of(o) for o in OBJECTIVES)


OBJECTIVE_INDEX: Mapping[Objective, int] = MappingProxyType(
    {o: i for i, o in enumerate(OBJECTIVES)}
)
