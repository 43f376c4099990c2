"""Sites that have none of the requested accelerator model at all."""

import numpy as np

from cnbrain.placement.cycle import CycleState
from cnbrain.placement.framework import BoolMatrix, Code


class AcceleratorModelFilter:
    name = "accelerator_model"
    code = Code.UNRESOLVABLE
    reason = "site has no accelerators of the requested model"

    def filter(self, state: CycleState) -> BoolMatrix:
        b, cap = state.batch, state.arrays.cap_acc_by_model
        out = np.ones((len(b), state.arrays.n_sites), dtype=bool)
        wants = b.acc_count > 0
        out[wants & (b.acc_column < 0)] = False
        for column in np.unique(b.acc_column[wants & (b.acc_column >= 0)]).tolist():
            out[wants & (b.acc_column == column)] = cap[column] > 0
        return out
