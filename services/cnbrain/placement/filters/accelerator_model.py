"""Sites that have none of the requested accelerator model at all."""

import numpy as np

from cnbrain.netmap.arrays import IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.framework import BoolMatrix, Code


class AcceleratorModelFilter:
    name = "accelerator_model"
    code = Code.UNRESOLVABLE
    reason = "site has no accelerators of the requested model"

    def filter(self, state: CycleState) -> BoolMatrix:
        b, cap = state.batch, state.arrays.cap_acc_by_model
        out = np.ones((len(b), state.arrays.n_sites), dtype=bool)
        wants = b.acc_milli > 0
        out[wants & (b.acc_column < 0)] = False
        for column in sorted(set(b.acc_column[wants & (b.acc_column >= 0)].tolist())):
            out[wants & (b.acc_column == column)] = cap[column] > 0
        return out

    def explain(self, state: CycleState, rejected: BoolMatrix, rows: IntArray) -> list[str]:
        """The model the request wants ("wants 64 H800, none of that model there")."""
        messages = []
        for row in rows.tolist():
            acc = state.batch.requests[row].resources.accelerator
            want = f"{acc.count} {acc.model}" if acc else "accelerators"
            messages.append(f"wants {want}, none of that model there")
        return messages
