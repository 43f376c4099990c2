"""Weighted scores of the feasible (request, site) pairs of a cycle, stored by request row."""

from dataclasses import dataclass

import numpy as np

from cnbrain.netmap.arrays import FloatArray, IntArray


@dataclass(frozen=True, slots=True, eq=False)
class PairScores:
    """Scores of (row, site) pairs, grouped by row with sites ascending within each row.

    `row_start[r]:row_start[r + 1]` indexes row r's pairs in `sites` and `values`.
    """

    row_start: IntArray
    sites: IntArray
    values: FloatArray

    @classmethod
    def of(cls, n_rows: int, rows: IntArray, sites: IntArray, values: FloatArray) -> "PairScores":
        """From pairs sorted by row, then site (as `np.nonzero` returns them)."""
        row_start = np.searchsorted(rows, np.arange(n_rows + 1)).astype(np.int64)
        return cls(row_start=row_start, sites=sites, values=values)

    @classmethod
    def empty(cls, n_rows: int) -> "PairScores":
        nothing = np.zeros(0, dtype=np.int64)
        return cls(np.zeros(n_rows + 1, dtype=np.int64), nothing, np.zeros(0))

    def row(self, row: int) -> tuple[IntArray, FloatArray]:
        """The scored sites of `row` (ascending) and their scores."""
        lo, hi = self.row_start[row], self.row_start[row + 1]
        return self.sites[lo:hi], self.values[lo:hi]

    def of_sites(self, row: int, sites: IntArray) -> FloatArray:
        """Scores of `sites` for `row`; inf for a site that was not scored (infeasible)."""
        scored, values = self.row(row)
        at = np.minimum(np.searchsorted(scored, sites), max(len(scored) - 1, 0))
        if len(scored) == 0:
            return np.full(len(sites), np.inf)
        return np.where(scored[at] == sites, values[at], np.inf)
