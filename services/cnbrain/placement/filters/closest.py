"""For filter messages: among the sites a plugin rejected for a request, the closest one."""

import numpy as np
import numpy.typing as npt

from cnbrain.netmap.arrays import IntArray
from cnbrain.placement.framework import BoolMatrix


def closest(
    rejected: BoolMatrix, closeness: npt.NDArray[np.float64], rows: IntArray
) -> tuple[IntArray, IntArray]:
    """For each of `rows` (each with a rejected site): the rejected site with the highest
    `closeness`, the first on ties; and how many sites were rejected. `closeness` is
    (len(rows) x sites), one line per row of `rows`, or broadcasts to it."""
    picked = rejected[rows]
    values = np.broadcast_to(closeness, picked.shape)
    best = np.where(picked, values, -np.inf).argmax(axis=1)
    first = picked.argmax(axis=1)
    best = np.where(picked[np.arange(len(rows)), best], best, first)
    return best.astype(np.int64), np.count_nonzero(picked, axis=1).astype(np.int64)


def amount(value: float) -> str:
    """A number as a caller reads it: integers bare, fractions to three decimals."""
    return f"{round(value, 3):g}"
