"""Extension points of the placement pipeline: filter plugins, score plugins, selection
policies, strategies.

A cycle runs: snapshot -> filter (every filter plugin, in order) -> score (every score
plugin, weighted) -> select (a selection policy such as local-first, calling one strategy:
Top-N, routes, solver; or a baseline) -> reserve. Filters and scores work on whole batches:
a (requests x sites) matrix per plugin. The objective an option is judged by is the weighted
sum of the enabled score plugins' terms (`cnbrain.placement.terms`).
"""

from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from cnbrain.domain.enums import Objective
from cnbrain.netmap.arrays import FloatArray, IntArray

if TYPE_CHECKING:
    from cnbrain.placement.cycle import CycleState, Option
    from cnbrain.placement.terms import OptionFacts

BoolMatrix = npt.NDArray[np.bool_]
FloatMatrix = npt.NDArray[np.float64]


class Code(StrEnum):
    """What a filter says of a (request, site) pair: the closed set of status codes."""

    SUCCESS = "success"
    """The site may take the request."""
    UNSCHEDULABLE = "unschedulable"
    """Not now: does not fit now; may fit when capacity is released."""
    UNRESOLVABLE = "unschedulable_and_unresolvable"
    """Never on this site: cannot fit while the map and the request stay as they are
    (architecture, accelerator model, interconnect, labels, policy, latency bound)."""


class FilterRejection(NamedTuple):
    """The sites one filter plugin rejected for one request, and why.

    `reason` is the plugin's fixed description of its constraint; `message` says, with
    amounts, how the request and the closest rejected site differ (say "wants 64 H800, 16
    free at XJ-hub" or "best path 52.1 ms to XJ-hub > bound 40 ms")."""

    code: Code
    plugin: str
    reason: str
    message: str
    sites: int


class FilterPlugin(Protocol):
    """A hard constraint. `filter` returns True where the site may take the request; every
    False is a rejection with the plugin's `code`.

    `explain` gets, for the whole batch, the sites this plugin rejected that no earlier
    plugin did, and the request rows with at least one such site; it returns one message
    per such row, in order, with amounts."""

    name: str
    code: Code
    reason: str

    def filter(self, state: "CycleState") -> BoolMatrix: ...

    def explain(self, state: "CycleState", rejected: BoolMatrix, rows: IntArray) -> list[str]: ...


class ScorePlugin(Protocol):
    """One objective term (normalised; 0 is best), defined once by `term`.

    `term` gets the facts of aligned (request row, site, route) options and returns the
    plugin's term of each: the solver minimises the weighted sum of the enabled plugins'
    terms. Before routes exist, the same term over `OptionFacts.best_case` (the lowest
    possible latency, no bandwidth cost, no link load) is the estimate that ranks the
    sites (`cnbrain.placement.terms.estimates`)."""

    name: str
    objective: Objective

    def term(self, state: "CycleState", facts: "OptionFacts") -> FloatArray: ...


class SelectionPolicy(Protocol):
    """How the feasible sites are offered to the strategy, in tiers (say, the source
    province first). `select` returns the chosen option per request row and, per row,
    whether its first tier had a feasible site; `explain` says in a sentence how the policy
    applied to request `row`, given the option finally held for it (None if none)."""

    name: str

    def select(
        self, state: "CycleState", strategy: "Strategy", feasible: BoolMatrix
    ) -> "tuple[dict[int, Option], npt.NDArray[np.bool_]]": ...

    def explain(
        self, state: "CycleState", row: int, first_tier: bool, option: "Option | None"
    ) -> str: ...


class Strategy(Protocol):
    """Chooses at most one option per request row among the `eligible` sites.

    Implementations read capacity from the state's working arrays and must not choose a
    set of options that together exceed them; the pipeline reserves what they return.
    """

    name: str

    def choose(
        self, state: "CycleState", eligible: BoolMatrix, rows: Sequence[int]
    ) -> "dict[int, Option]": ...
