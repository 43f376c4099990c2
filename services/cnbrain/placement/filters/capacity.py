"""Sites without enough free CPU, memory, storage or accelerators for the request now."""

import numpy as np

from cnbrain.placement.cycle import CycleState
from cnbrain.placement.framework import BoolMatrix, Code


class CapacityFilter:
    name = "capacity"
    code = Code.UNSCHEDULABLE
    reason = "site has not enough free CPU, memory, storage or accelerators"

    def filter(self, state: CycleState) -> BoolMatrix:
        b, s = state.batch, state.snapshot
        ok = s.free_cpu_m[None, :] >= b.cpu_m[:, None]
        ok &= s.free_mem_mib[None, :] >= b.mem_mib[:, None]
        ok &= s.free_storage_gib[None, :] >= b.storage_gib[:, None]
        wants = b.acc_count > 0
        ok[wants & (b.acc_column < 0)] = False
        for column in np.unique(b.acc_column[wants & (b.acc_column >= 0)]).tolist():
            rows = np.flatnonzero(wants & (b.acc_column == column))
            ok[rows] &= s.free_acc_by_model[column][None, :] >= b.acc_count[rows, None]
        return ok
