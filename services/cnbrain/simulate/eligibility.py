"""Which sites each job of a run may use, and which of them can take it now.

The engine's filter plugins split into two kinds by their code: every plugin with code
`unschedulable_and_unresolvable` depends on the map and the request only, and the one with
code `unschedulable` (`capacity`) depends on free capacity. `Eligibility` runs the first kind
once, for every job of a run, on an empty ledger; what remains is each job's *eligible* sites.
Then:

- a job *can ever fit* when some eligible site's total capacity takes it (the engine on an
  empty map would find a feasible site);
- a job *fits now* on an eligible site whose free capacity in a snapshot takes it (exactly
  the engine's feasible set) and, for a job that asks for bandwidth, that a path of links
  with that bandwidth free reaches within its latency bound (`cnbrain.simulate.reach`, a
  necessary condition for any route the engine could take). A job that fits no site now
  would be rejected by the engine, so the simulator does not ask it; one that fits may still
  be rejected (the strategy found no route to the sites it considered, or its batch took the
  capacity).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import FloatArray, IntArray
from cnbrain.placement.batch import RequestBatch
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.filtering import run_filters
from cnbrain.placement.framework import Code
from cnbrain.placement.registry import FILTERS
from cnbrain.simulate.reach import Reach

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True, eq=False)
class Eligibility:
    """Per-job demand columns and eligible sites, rows in the order of the requests given.

    `never_fits_reason[i]` is None for a job that can ever fit, else why it cannot, in the
    engine's words ("no site meets the hard constraints: ...").
    """

    eligible: BoolArray
    """(jobs x sites): sites that pass every unresolvable filter."""
    cpu_m: IntArray
    mem_mib: IntArray
    storage_gib: IntArray
    acc_column: IntArray
    acc_milli: IntArray
    need_mbps: IntArray
    max_latency_ms: FloatArray
    access: IntArray
    """Per job: index of its access node in `reach`."""
    reach: Reach
    never_fits_reason: tuple[str | None, ...]

    @classmethod
    def of(cls, engine: PlacementEngine, requests: Sequence[PlacementRequest]) -> "Eligibility":
        """Run the engine's unresolvable filters on an empty ledger for every request.

        Raises RequestError, naming the field, when a request does not fit the map's names.
        """
        arrays = engine.arrays
        batch = RequestBatch.build(requests, arrays, engine.config.weight_matrix)
        empty = Snapshot.empty(arrays)
        state = CycleState(
            batch=batch,
            snapshot=empty,
            router=engine.router,
            k_paths=engine.config.k_paths,
            score_plugins=engine.score_plugins,
        )
        n = len(batch)
        plugins = [FILTERS[name]() for name in engine.config.filters]
        never = [plugin for plugin in plugins if plugin.code is Code.UNRESOLVABLE]
        capacity = [plugin.name for plugin in plugins if plugin.code is not Code.UNRESOLVABLE]
        filtered = run_filters(never if n else [], state, explain=False)
        alive = filtered.feasible
        removed = [
            (plugin.name, plugin.reason, filtered.counts[i]) for i, plugin in enumerate(never)
        ]
        nodes, access = np.unique(np.asarray(batch.access_nodes, dtype=object), return_inverse=True)
        columns: dict[str, Any] = {
            "eligible": alive,
            "cpu_m": batch.cpu_m,
            "mem_mib": batch.mem_mib,
            "storage_gib": batch.storage_gib,
            "acc_column": batch.acc_column,
            "acc_milli": batch.acc_milli,
            "need_mbps": batch.need_mbps,
            "max_latency_ms": batch.max_latency_ms,
            "access": access.astype(np.int64).reshape(n),
        }
        reach = Reach(arrays, [str(node) for node in nodes])
        eligibility = cls(**columns, reach=reach, never_fits_reason=())
        fits_empty = eligibility.fits(empty, np.arange(n))
        left = np.count_nonzero(alive, axis=1)
        reasons: list[str | None] = []
        for row in range(n):
            if fits_empty[row]:
                reasons.append(None)
                continue
            parts = [
                f"{reason} ({int(count[row])} sites, {plugin})"
                for plugin, reason, count in removed
                if count[row] > 0
            ]
            if left[row] > 0:
                parts.append(
                    f"larger than the total capacity of every remaining site "
                    f"({int(left[row])} sites, {', '.join(capacity) or 'capacity'})"
                )
            reasons.append("no site meets the hard constraints: " + "; ".join(parts))
        return cls(**columns, reach=reach, never_fits_reason=tuple(reasons))

    def fit_matrix(self, snapshot: Snapshot, rows: IntArray) -> BoolArray:
        """(len(rows) x sites): eligible sites whose free capacity in `snapshot` takes the job
        and that a path with its bandwidth free reaches within its bound (see the module doc).
        """
        return self.routed(snapshot, rows, self.compute_fit(snapshot, rows))

    def compute_fit(self, snapshot: Snapshot, rows: IntArray) -> BoolArray:
        """(len(rows) x sites): eligible sites whose free capacity in `snapshot` takes the job."""
        ok = self.eligible[rows]
        ok = ok & (snapshot.free_cpu_m[None, :] >= self.cpu_m[rows, None])
        ok &= snapshot.free_mem_mib[None, :] >= self.mem_mib[rows, None]
        ok &= snapshot.free_storage_gib[None, :] >= self.storage_gib[rows, None]
        wants = self.acc_milli[rows] > 0
        if wants.any():
            columns = self.acc_column[rows]
            ok[wants & (columns < 0)] = False
            for column in np.unique(columns[wants & (columns >= 0)]).tolist():
                sub = np.flatnonzero(wants & (columns == column))
                free = snapshot.free_acc_by_model[column]
                ok[sub] &= free[None, :] >= self.acc_milli[rows[sub], None]
        return ok

    def routed(self, snapshot: Snapshot, rows: IntArray, fit: BoolArray) -> BoolArray:
        """`fit` (for `rows`) narrowed to the sites a path with the job's bandwidth free
        reaches within its bound."""
        ok = fit.copy()
        routed = np.flatnonzero((self.need_mbps[rows] > 0) & ok.any(axis=1))
        if len(routed):
            picked = rows[routed]
            ok[routed] &= self.reach.within(
                snapshot,
                access=self.access[picked],
                need_mbps=self.need_mbps[picked],
                bound_ms=self.max_latency_ms[picked],
            )
        return ok

    def fits(self, snapshot: Snapshot, rows: IntArray) -> BoolArray:
        """For each of `rows`: does some eligible site's free capacity take the job now?"""
        if len(rows) == 0:
            return np.zeros(0, dtype=bool)
        return any_site(self.fit_matrix(snapshot, rows))


def any_site(matrix: BoolArray) -> BoolArray:
    """Per row of a (jobs x sites) matrix: is any site True?"""
    return np.asarray(matrix.any(axis=1), dtype=bool)
