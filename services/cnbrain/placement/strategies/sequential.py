"""Baselines that place requests one at a time: each takes the first site, in the baseline's
own order, that still fits and has a feasible shortest path."""

from collections.abc import Callable, Sequence

import numpy as np

from cnbrain.netmap.arrays import IntArray
from cnbrain.placement.cycle import CycleState, Option, RowInsight
from cnbrain.placement.framework import BoolMatrix

SiteOrder = Callable[[CycleState, int, IntArray], IntArray]
"""Orders the sites (that fit now) for one request row; the first with a path wins."""


class SequentialStrategy:
    def __init__(self, *, name: str, order: SiteOrder) -> None:
        self.name = name
        self._order = order

    def choose(
        self, state: CycleState, eligible: BoolMatrix, rows: Sequence[int]
    ) -> dict[int, Option]:
        chosen: dict[int, Option] = {}
        priority = state.batch.priority
        for row in sorted(rows, key=lambda r: (-int(priority[r]), r)):
            with state.timed("order"):
                sites = np.flatnonzero(eligible[row])
                sites = self._order(state, row, sites[state.fits(np.full(len(sites), row), sites)])
            with state.timed("route"):
                for site in sites.tolist():
                    options = state.options({row: np.asarray([site])}, k=1)[row]
                    if options:
                        chosen[row] = options[0]
                        state.take(options[0])
                        break
            option = chosen.get(row)
            state.insights[row] = RowInsight(
                candidates=(
                    (
                        option.site,
                        float(state.scores.of_sites(row, np.asarray([option.site]))[0]),
                        option.objective,
                    ),
                )
                if option
                else (),
                solver_status="SEQUENTIAL",
                optimal=False,
            )
        return chosen
