"""Selection policies: in which tiers the feasible sites are offered to the strategy.

`local-first` (the default): a request whose source province has a feasible site is placed
in its province if it can be served there at all, unless it asks for `national_optimum`;
only then are other provinces' sites offered. `nationwide`: every feasible site at once.
"""

import numpy as np
import numpy.typing as npt

from cnbrain.placement.cycle import CycleState, Option
from cnbrain.placement.framework import BoolMatrix, Strategy

NATIONAL_OPTIMUM = "national optimum requested: every province was searched"


class LocalFirst:
    name = "local-first"

    def select(
        self, state: CycleState, strategy: Strategy, feasible: BoolMatrix
    ) -> tuple[dict[int, Option], npt.NDArray[np.bool_]]:
        b = state.batch
        local = feasible & (state.arrays.site_province[None, :] == b.source_province[:, None])
        local_tier = ~b.national_optimum & local.any(axis=1)
        rows = np.flatnonzero(local_tier).tolist()
        chosen = strategy.choose(state, local, rows) if rows else {}
        rest = [row for row in range(len(b)) if row not in chosen]
        if rest:
            chosen.update(strategy.choose(state, feasible, rest))
        return chosen, local_tier

    def explain(self, state: CycleState, row: int, first_tier: bool, option: Option | None) -> str:
        request = state.batch.requests[row]
        province = request.source_province
        if request.national_optimum:
            return NATIONAL_OPTIMUM
        if not first_tier:
            return f"no site in {province} meets the constraints: national hubs were searched"
        if option is not None and state.arrays.map.sites[option.site].province == province:
            return f"a site in {province} fits: placed locally"
        return (
            f"sites in {province} meet the constraints but none could be served: "
            "national hubs were searched"
        )


class Nationwide:
    name = "nationwide"

    def select(
        self, state: CycleState, strategy: Strategy, feasible: BoolMatrix
    ) -> tuple[dict[int, Option], npt.NDArray[np.bool_]]:
        n = len(state.batch)
        return strategy.choose(state, feasible, list(range(n))), np.zeros(n, dtype=bool)

    def explain(self, state: CycleState, row: int, first_tier: bool, option: Option | None) -> str:
        if state.batch.requests[row].national_optimum:
            return NATIONAL_OPTIMUM
        return "local-first is off: every province was searched"
