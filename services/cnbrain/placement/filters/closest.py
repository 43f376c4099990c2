"""For filter messages: among the sites a plugin rejected for a request, the closest one."""

import numpy as np
import numpy.typing as npt

from cnbrain.netmap.arrays import IntArray
from cnbrain.placement.framework import BoolMatrix


def closest(
    rejected: BoolMatrix, closeness: npt.NDArray[np.float64]
) -> tuple[IntArray, IntArray, IntArray]:
    """(the rows with a rejected site; per such row, the rejected site with the highest
    `closeness`, the first on ties; and how many sites it rejected). `closeness` is
    (rows x sites), or broadcasts to it."""
    rows = np.flatnonzero(rejected.any(axis=1))
    picked = rejected[rows]
    values = np.broadcast_to(closeness, rejected.shape)[rows]
    best = np.where(picked, values, -np.inf).argmax(axis=1)
    first = picked.argmax(axis=1)
    best = np.where(picked[np.arange(len(rows)), best], best, first)
    return rows, best.astype(np.int64), np.count_nonzero(picked, axis=1).astype(np.int64)


def per_row(n: int, rows: IntArray, messages: list[str]) -> list[str]:
    """`messages` of `rows` spread over all n rows; the other rows get an empty message."""
    out = [""] * n
    for row, message in zip(rows.tolist(), messages, strict=True):
        out[row] = message
    return out


def amount(value: float) -> str:
    """A number as a caller reads it: integers bare, fractions to three decimals."""
    return f"{round(value, 3):g}"
