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
        ok = (
            (s.free_cpu_m[None, :] >= b.cpu_m[:, None])
            & (s.free_mem_mib[None, :] >= b.mem_mib[:, None])
            & (s.free_storage_gib[None, :] >= b.storage_gib[:, None])
        )
        wants_acc = b.acc_count > 0
        if not wants_acc.any():
            return ok
        if s.free_acc_by_model.shape[0] == 0:
            return ok & ~wants_acc[:, None]
        rows = np.flatnonzero(wants_acc)
        columns = b.acc_column[rows]
        free = s.free_acc_by_model[np.maximum(columns, 0)]
        ok[rows] &= (columns[:, None] >= 0) & (free >= b.acc_count[rows, None])
        return ok
