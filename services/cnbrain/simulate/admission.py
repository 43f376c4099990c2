"""The order in which the simulator's retry rounds look at waiting jobs: its admission choice.

- `retry` (the default): arrival order, the FIFO retry queue of `cnbrain.simulate.simulation`.
- `fair`: the order of the scheduling core, `cnbrain.scheduling.fair_share.fair_order`, taken
  afresh at every retry round over the jobs the round looks at. Tenants are the trace's
  `tenant` field, all of weight 1; every job is in one priority class (traces name none);
  a tenant's usage is the demand of its running jobs, the capacity the map's total, both in
  the ledger's units (millicores, MiB, GiB, accelerators per model). Bandwidth is not a
  dimension of the shares.
- `backfill`: the fair order, planned with conservative backfill over the running jobs'
  remaining windows; a round looks only at the jobs planned to start now
  (`cnbrain.simulate.backfill_round`).

Only the order changes: each job is still placed by the engine (the policy under test), one
at a time, with the same skips and checks; arrivals are still offered to the engine at once.
Not modelled yet: preemption, and priority classes beyond one.
"""

from collections.abc import Sequence
from enum import StrEnum

import numpy as np

from cnbrain.netmap.arrays import IntArray, MapArrays
from cnbrain.scheduling.classes import PriorityClass, PriorityClasses
from cnbrain.scheduling.fair_share import fair_order
from cnbrain.scheduling.resources import Resources
from cnbrain.scheduling.work import QueuedWork
from cnbrain.simulate.eligibility import Eligibility

ONE_CLASS = "default"
"""The one priority class every simulated job is in."""


class Admission(StrEnum):
    RETRY = "retry"
    FAIR = "fair"
    BACKFILL = "backfill"


ADMISSIONS = tuple(a.value for a in Admission)


def checked_admission(name: str) -> Admission:
    """The admission called `name`; ValueError naming the known ones otherwise."""
    try:
        return Admission(name)
    except ValueError:
        raise ValueError(f"unknown admission {name!r}; known: {', '.join(ADMISSIONS)}") from None


class FairQueue:
    """Fair order of waiting rows, and each tenant's usage by its running rows.

    Rows index the simulation's jobs; `tenants[row]` is a row's tenant, `arrival[row]` its
    (scaled) arrival time, its demand that of `eligibility` (the engine's request arrays)."""

    def __init__(
        self,
        arrays: MapArrays,
        eligibility: Eligibility,
        tenants: Sequence[str],
        arrival: Sequence[float],
    ) -> None:
        models = arrays.map.accelerator_models
        self.capacity = Resources.of(
            cpu_m=int(arrays.cap_cpu_m.sum()),
            mem_mib=int(arrays.cap_mem_mib.sum()),
            storage_gib=int(arrays.cap_storage_gib.sum()),
            accelerators={m: int(arrays.cap_acc[:, c].sum()) for c, m in enumerate(models)},
        )
        self.demand = [
            Resources.of(
                cpu_m=int(eligibility.cpu_m[row]),
                mem_mib=int(eligibility.mem_mib[row]),
                storage_gib=int(eligibility.storage_gib[row]),
                accelerators=(
                    {models[int(eligibility.acc_column[row])]: int(eligibility.acc_count[row])}
                    if eligibility.acc_count[row] > 0
                    else {}
                ),
            )
            for row in range(len(tenants))
        ]
        self.tenants, self.arrival = list(tenants), list(arrival)
        self.usage: dict[str, Resources] = {}
        self.classes = PriorityClasses(
            [PriorityClass(ONE_CLASS, 0, preemptible=False, default_max_wait_s=0)],
            default=ONE_CLASS,
        )

    def started(self, row: int) -> None:
        """Row `row` now holds its demand."""
        tenant = self.tenants[row]
        self.usage[tenant] = self.usage.get(tenant, Resources()) + self.demand[row]

    def departed(self, row: int) -> None:
        """Row `row`, started before, holds nothing any more."""
        tenant = self.tenants[row]
        self.usage[tenant] = self.usage[tenant] - self.demand[row]

    def order(self, rows: IntArray) -> IntArray:
        """`rows` in `fair_order` given the usage now (module docstring). Ids are the rows,
        zero-padded, so that rows of one tenant arriving together keep their row order."""
        queued = [
            QueuedWork(
                id=f"{row:012d}",
                tenant=self.tenants[row],
                class_name=ONE_CLASS,
                demand=self.demand[row],
                submitted_at=self.arrival[row],
            )
            for row in rows.tolist()
        ]
        ordered = fair_order(queued, classes=self.classes, usage=self.usage, capacity=self.capacity)
        return np.fromiter((int(w.id) for w in ordered), dtype=np.int64, count=len(ordered))
