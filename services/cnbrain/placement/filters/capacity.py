"""Sites without enough free CPU, memory, storage or accelerators for the request now."""

import numpy as np

from cnbrain.domain.accelerators import MILLI
from cnbrain.netmap.arrays import IntArray
from cnbrain.placement.cycle import CycleState
from cnbrain.placement.filters.closest import amount, closest
from cnbrain.placement.framework import BoolMatrix, Code


class CapacityFilter:
    name = "capacity"
    code = Code.UNSCHEDULABLE
    reason = "site has not enough free CPU, memory, storage or accelerators"

    def filter(self, state: CycleState) -> BoolMatrix:
        b, s = state.batch, state.snapshot
        ok = s.free_cpu_m[None, :] >= b.cpu_m[:, None]
        ok &= s.free_mem_mib[None, :] >= b.mem_mib[:, None]
        ok &= s.free_storage_gib[None, :] >= b.storage_gib[:, None]
        wants = b.acc_milli > 0
        ok[wants & (b.acc_column < 0)] = False
        for column in sorted(set(b.acc_column[wants & (b.acc_column >= 0)].tolist())):
            rows = np.flatnonzero(wants & (b.acc_column == column))
            ok[rows] &= s.free_acc_by_model[column][None, :] >= b.acc_milli[rows, None]
        return ok

    def explain(self, state: CycleState, rejected: BoolMatrix, rows: IntArray) -> list[str]:
        """Per resource that falls short: what the request wants and what is free at the
        rejected site with the most of it ("wants 64 H800, 16 free at XJ-hub")."""
        b, s = state.batch, state.snapshot
        parts: dict[int, list[str]] = {row: [] for row in rows.tolist()}
        ours = rejected[rows]
        for unit, scale, want, free in (
            ("CPU cores", 1000, b.cpu_m, s.free_cpu_m),
            ("GiB memory", 1024, b.mem_mib, s.free_mem_mib),
            ("GiB storage", 1, b.storage_gib, s.free_storage_gib),
        ):
            wanted = want[rows]
            short = ours & (free[None, :] < wanted[:, None])
            self._shortfall(state, parts, rows, short, wanted, free, unit, scale)
        count, column = b.acc_milli[rows], b.acc_column[rows]
        wants = count > 0
        for row in rows[wants & (column < 0)].tolist():
            model = b.requests[row].resources.accelerator
            name = model.model if model else "accelerators"
            parts[row].append(f"wants {amount(b.acc_milli[row] / MILLI)} {name}, none on this map")
        models = state.arrays.map.accelerator_models
        for col in sorted(set(column[wants & (column >= 0)].tolist())):
            of_model = np.flatnonzero(wants & (column == col))
            free = s.free_acc_by_model[col]
            short = ours[of_model] & (free[None, :] < count[of_model, None])
            unit = models[col]
            self._shortfall(state, parts, rows[of_model], short, count[of_model], free, unit, MILLI)
        return ["; ".join(p) for p in parts.values()]

    @staticmethod
    def _shortfall(
        state: CycleState,
        parts: dict[int, list[str]],
        rows: IntArray,
        short: BoolMatrix,
        want: IntArray,
        free: IntArray,
        unit: str,
        scale: int,
    ) -> None:
        """Appends, to `parts` of `rows[i]` for every i whose `short[i]` has a site, the
        request's `want[i]` and the most `free` among those sites, both over `scale`."""
        if not short.any():
            return
        sites = state.arrays.map.sites
        found = np.flatnonzero(short.any(axis=1))
        best, count = closest(short, free.astype(np.float64)[None, :], found)
        for i, site, n in zip(found.tolist(), best.tolist(), count.tolist(), strict=True):
            wanted = amount(int(want[i]) / scale)
            has = amount(int(free[site]) / scale)
            where = (
                f"{has} free at {sites[site].id}"
                if n == 1
                else f"at most {has} free ({sites[site].id})"
            )
            parts[int(rows[i])].append(f"wants {wanted} {unit}, {where}")
