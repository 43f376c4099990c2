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
        rows = np.flatnonzero(b.acc_count > 0)
        if len(rows) == 0:
            return out
        if cap.shape[0] == 0:
            out[rows] = False
            return out
        columns = b.acc_column[rows]
        out[rows] = (columns[:, None] >= 0) & (cap[np.maximum(columns, 0)] > 0)
        return out
