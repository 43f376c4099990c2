"""Extension points of the placement pipeline: filter plugins, score plugins, strategies.

A cycle runs: snapshot -> filter (every filter plugin, in order) -> score (every score
plugin, weighted) -> select (one strategy: Top-N, routes, solver; or a baseline) -> reserve.
Filters and scores work on whole batches: a (requests x sites) matrix per plugin.
"""

from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

from cnbrain.domain.enums import Objective
from cnbrain.netmap.arrays import FloatArray, IntArray

if TYPE_CHECKING:
    from cnbrain.placement.cycle import CycleState, Option

BoolMatrix = npt.NDArray[np.bool_]
FloatMatrix = npt.NDArray[np.float64]


class Code(StrEnum):
    """Why a plugin rejected a site: the closed set of rejection codes."""

    UNSCHEDULABLE = "unschedulable"
    """Does not fit now; may fit when capacity is released."""
    UNRESOLVABLE = "unschedulable_and_unresolvable"
    """Cannot fit while the map and the request stay as they are."""


class FilterPlugin(Protocol):
    """A hard constraint. `filter` returns True where the site may take the request."""

    name: str
    code: Code
    reason: str

    def filter(self, state: "CycleState") -> BoolMatrix: ...


class ScorePlugin(Protocol):
    """An estimate, from the site alone, of one objective term (normalised; 0 is best).

    `score` gets the (request row, site) pairs that passed every filter as two aligned index
    arrays and returns one value per pair."""

    name: str
    objective: Objective

    def score(self, state: "CycleState", rows: IntArray, sites: IntArray) -> FloatArray: ...


class Strategy(Protocol):
    """Chooses at most one option per request row among the `eligible` sites.

    Implementations read capacity from the state's working arrays and must not choose a
    set of options that together exceed them; the pipeline reserves what they return.
    """

    name: str

    def choose(
        self, state: "CycleState", eligible: BoolMatrix, rows: Sequence[int]
    ) -> "dict[int, Option]": ...
