"""Top-N candidates by weighted score, k routes each, joint choice by CP-SAT.

Requests are taken in chunks. Each chunk goes through rounds: Top-N among the sites that
still fit, routes, one joint solve, then the chosen options are taken from the working
capacity. Requests that had options but lost them to others of the chunk get another round
(at most `ROUNDS`): with the capacity others took now accounted for, routing finds paths
around links that are full.

With `top_n=None` every eligible site is a candidate: the exact monolithic model, meant for
quality checks on small maps.
"""

from collections.abc import Sequence

import numpy as np

from cnbrain.netmap.arrays import FloatArray, IntArray
from cnbrain.placement.cycle import CycleState, Option, RowInsight
from cnbrain.placement.framework import BoolMatrix
from cnbrain.placement.solver import SolverSettings, solve_assignment

ROUNDS = 3


def top_n(sites: IntArray, scores: FloatArray, n: int | None) -> tuple[IntArray, FloatArray]:
    """The n `sites` with the lowest `scores` (aligned arrays), best first, with their scores."""
    if n is not None and len(sites) > n:
        keep = np.argpartition(scores, n - 1)[:n]
        sites, scores = sites[keep], scores[keep]
    order = np.argsort(scores, kind="stable")
    return sites[order], scores[order]


class SolverStrategy:
    def __init__(
        self, *, name: str, top_n: int | None, settings: SolverSettings, chunk: int = 200
    ) -> None:
        self.name = name
        self._top_n = top_n
        self._settings = settings
        self._chunk = chunk

    def choose(
        self, state: CycleState, eligible: BoolMatrix, rows: Sequence[int]
    ) -> dict[int, Option]:
        chosen: dict[int, Option] = {}
        for start in range(0, len(rows), self._chunk):
            pending = list(rows[start : start + self._chunk])
            for _ in range(ROUNDS):
                won, contended = self._round(state, eligible, pending)
                chosen.update(won)
                pending = contended
                if not won or not pending:
                    break
        return chosen

    def _round(
        self, state: CycleState, eligible: BoolMatrix, rows: Sequence[int]
    ) -> tuple[dict[int, Option], list[int]]:
        """One joint choice; returns what was chosen and the rows that had options but lost."""
        with state.timed("top_n"):
            candidates: dict[int, IntArray] = {}
            scores: dict[int, FloatArray] = {}
            for row in rows:
                sites, values = state.scores.row(row)
                keep = eligible[row, sites] & state.fits(np.full(len(sites), row), sites)
                candidates[row], scores[row] = top_n(sites[keep], values[keep], self._top_n)
        with state.timed("route"):
            options = state.options(candidates)
        with state.timed("solve"):
            assignment = solve_assignment(state, options, self._settings)
        for row in rows:
            best: dict[int, float] = {}
            for o in options[row]:
                best[o.site] = min(best.get(o.site, o.objective), o.objective)
            state.insights[row] = RowInsight(
                candidates=tuple(
                    (site, score, best.get(site))
                    for site, score in zip(
                        candidates[row].tolist(), scores[row].tolist(), strict=True
                    )
                ),
                solver_status=assignment.status,
                optimal=assignment.optimal,
            )
        won: dict[int, Option] = {}
        for row, option in assignment.chosen.items():
            # The model counts a site's totals; a gang also needs its nodes free there.
            if state.fits(np.array([row]), np.array([option.site]))[0]:
                state.take(option)
                won[row] = option
        lost = [row for row in rows if options[row] and row not in won]
        return won, lost
