"""The filter step: every filter plugin in order, each site counted against the first plugin
that rejects it, and each rejection explained with the plugin's code and amounts."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cnbrain.netmap.arrays import IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.framework import BoolMatrix, FilterPlugin, FilterRejection


@dataclass(frozen=True, slots=True, eq=False)
class Filtered:
    """`feasible`: (requests x sites), True where every plugin let the site through.
    `counts[i, row]`: sites plugin i rejected for `row` that no earlier plugin did.
    `messages[i]`: plugin i's message by row, for the rows it rejected a site of (empty when
    the step was run without explanations)."""

    plugins: tuple[FilterPlugin, ...]
    feasible: BoolMatrix
    counts: IntArray
    messages: tuple[Mapping[int, str], ...]

    def rejections(self, row: int) -> list[FilterRejection]:
        """The rejections of request `row`, in plugin order, one per plugin that rejected
        at least one site."""
        out = []
        for plugin, sites, messages in zip(
            self.plugins, self.counts[:, row].tolist(), self.messages, strict=True
        ):
            if sites:
                out.append(
                    FilterRejection(
                        code=plugin.code,
                        plugin=plugin.name,
                        reason=plugin.reason,
                        message=messages.get(row, ""),
                        sites=sites,
                    )
                )
        return out


def run_filters(
    plugins: Sequence[FilterPlugin], state: CycleState, *, explain: bool = True
) -> Filtered:
    """Runs `plugins` in order on the cycle's batch; with `explain`, each plugin that
    rejected a site explains its rejections."""
    n_rows, n_sites = len(state.batch), state.arrays.n_sites
    alive = np.ones((n_rows, n_sites), dtype=bool)
    left = alive.size
    counts = np.zeros((len(plugins), n_rows), dtype=np.int64)
    messages: list[Mapping[int, str]] = []
    for i, plugin in enumerate(plugins):
        through = alive & plugin.filter(state)
        still = int(np.count_nonzero(through))
        found: Mapping[int, str] = {}
        if still < left:
            rejected = alive ^ through
            counts[i] = np.count_nonzero(rejected, axis=1)
            if explain:
                rows = np.flatnonzero(counts[i])
                found = dict(zip(rows.tolist(), plugin.explain(state, rejected, rows), strict=True))
        messages.append(found)
        alive, left = through, still
    return Filtered(plugins=tuple(plugins), feasible=alive, counts=counts, messages=tuple(messages))
