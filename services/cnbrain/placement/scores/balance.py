"""Half the site's highest resource utilisation once the request is placed (the other half of
the balance term, link load, is known only once a path is chosen)."""

from cnbrain.domain.enums import Objective
from cnbrain.netmap.arrays import FloatArray, IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.objective import site_utilisation_after


class BalanceScore:
    name = "balance"
    objective = Objective.BALANCE

    def score(self, state: CycleState, rows: IntArray, sites: IntArray) -> FloatArray:
        s = state.snapshot
        util = site_utilisation_after(
            state.batch,
            state.arrays,
            s.free_cpu_m,
            s.free_mem_mib,
            s.free_storage_gib,
            s.free_acc,
            rows,
            sites,
        )
        return 0.5 * util
