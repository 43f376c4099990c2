"""Sites that lack a label the request requires."""

import numpy as np

from cnbrain.netmap.arrays import IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.framework import BoolMatrix, Code


class LabelsFilter:
    name = "labels"
    code = Code.UNRESOLVABLE
    reason = "site lacks a label the request requires"

    def filter(self, state: CycleState) -> BoolMatrix:
        sites = state.arrays.map.sites
        out = np.ones((len(state.batch), len(sites)), dtype=bool)
        for row, request in enumerate(state.batch.requests):
            for key, value in request.constraints.labels.items():
                out[row] &= np.fromiter(
                    (s.labels.get(key) == value for s in sites), bool, len(sites)
                )
        return out

    def explain(self, state: CycleState, rejected: BoolMatrix, rows: IntArray) -> list[str]:
        """The labels the request requires ("wants tier=gold")."""
        requests = state.batch.requests
        messages = [
            "wants "
            + ", ".join(f"{k}={v}" for k, v in sorted(requests[row].constraints.labels.items()))
            for row in rows.tolist()
        ]
        return messages
