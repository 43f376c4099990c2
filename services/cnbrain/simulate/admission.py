"""The order in which the simulator's retry rounds look at waiting jobs: its admission choice.

- `retry` (the default): arrival order, the FIFO retry queue of `cnbrain.simulate.simulation`.
- `fair`: the order of the scheduling core, `cnbrain.scheduling.fair_share.fair_order`, taken
  afresh at every retry round over the jobs the round looks at. Tenants are the trace's
  `tenant` field, all of weight 1; without classes every job is in one priority class;
  a tenant's usage is the demand of its running jobs, the capacity the map's total, both in
  the ledger's units (millicores, MiB, GiB, accelerators per model). Bandwidth is not a
  dimension of the shares.
- `backfill`: the scheduling core's admission round (`scheduling.admission.admission_round`:
  the fair order, planned with conservative backfill over the running jobs' remaining
  windows); a retry round looks only at the jobs it admits (`cnbrain.simulate.backfill_round`).

Only the order changes: each job is still placed by the engine (the policy under test), one
at a time, with the same skips and checks; arrivals are still offered to the engine at once.

With priority classes (`cnbrain.simulate.classes`), each job is in its drawn class: `fair`
and `backfill` put higher classes first, and `backfill` preempts for the stuck jobs of
classes that may preempt (`cnbrain.simulate.simulation`).
"""

from collections.abc import Sequence
from enum import StrEnum

import numpy as np

from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import IntArray, MapArrays
from cnbrain.scheduling.classes import PriorityClass, PriorityClasses
from cnbrain.scheduling.fair_share import fair_order
from cnbrain.scheduling.options import sites_capacity
from cnbrain.scheduling.resources import Resources
from cnbrain.scheduling.work import QueuedWork, RunningWork
from cnbrain.simulate.backfill_round import id_row, row_id
from cnbrain.simulate.eligibility import Eligibility

ONE_CLASS = "default"
"""The one priority class every simulated job is in when classes are off."""

ONE_CLASS_SET = PriorityClasses(
    [PriorityClass(ONE_CLASS, 0, preemptible=False, default_max_wait_s=0)], default=ONE_CLASS
)


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
    (scaled) arrival time, `class_names[row]` its class in `classes` (default: every row in
    `ONE_CLASS`), its demand that of `eligibility` (the engine's request arrays)."""

    def __init__(
        self,
        arrays: MapArrays,
        eligibility: Eligibility,
        tenants: Sequence[str],
        arrival: Sequence[float],
        *,
        classes: PriorityClasses = ONE_CLASS_SET,
        class_names: Sequence[str] | None = None,
    ) -> None:
        self.models = models = arrays.map.accelerator_models
        self.site_ids = [site.id for site in arrays.map.sites]
        self.site_index = {site_id: i for i, site_id in enumerate(self.site_ids)}
        self.link_ids = [link.id for link in arrays.map.links]
        self.link_index = arrays.link_index
        self.capacity = sites_capacity(arrays)
        self.demand = [
            Resources.of(
                cpu_m=int(eligibility.cpu_m[row]),
                mem_mib=int(eligibility.mem_mib[row]),
                storage_gib=int(eligibility.storage_gib[row]),
                accelerators=(
                    {models[int(eligibility.acc_column[row])]: int(eligibility.acc_milli[row])}
                    if eligibility.acc_milli[row] > 0
                    else {}
                ),
            )
            for row in range(len(tenants))
        ]
        self.tenants, self.arrival = list(tenants), list(arrival)
        self.usage: dict[str, Resources] = {}
        self.classes = classes
        self.class_names = (
            [ONE_CLASS] * len(self.tenants) if class_names is None else list(class_names)
        )
        self._queued: dict[int, QueuedWork] = {}

    def started(self, row: int) -> None:
        """Row `row` now holds its demand."""
        tenant = self.tenants[row]
        self.usage[tenant] = self.usage.get(tenant, Resources()) + self.demand[row]

    def departed(self, row: int) -> None:
        """Row `row`, started before, holds nothing any more."""
        tenant = self.tenants[row]
        self.usage[tenant] = self.usage[tenant] - self.demand[row]

    def queued(self, row: int) -> QueuedWork:
        """Row `row` as waiting work (id `backfill_round.row_id`)."""
        work = self._queued.get(row)
        if work is None:
            work = self._queued[row] = QueuedWork(
                id=row_id(row),
                tenant=self.tenants[row],
                class_name=self.class_names[row],
                demand=self.demand[row],
                submitted_at=self.arrival[row],
            )
        return work

    def running(
        self,
        row: int,
        *,
        started_at: float,
        site: int,
        links: Sequence[int] = (),
        mbps: int = 0,
    ) -> RunningWork:
        """Row `row` as work running on site index `site` since `started_at`, holding `mbps`
        on each link of index in `links` (its path)."""
        one = self.classes.get(self.class_names[row])
        held: dict[str, int] = {}
        if mbps > 0:
            for link in links:
                held[self.link_ids[link]] = held.get(self.link_ids[link], 0) + mbps
        return RunningWork(
            id=row_id(row),
            tenant=self.tenants[row],
            class_value=one.value,
            preemptible=one.preemptible,
            started_at=started_at,
            demand=self.demand[row],
            site=self.site_ids[site],
            bandwidth=Resources.bandwidth(held),
        )

    def free_at(self, snapshot: Snapshot, site_id: str) -> Resources:
        """What site `site_id` has free in `snapshot`, in the dimensions of the demands."""
        i = self.site_index[site_id]
        return Resources.of(
            cpu_m=int(snapshot.free_cpu_m[i]),
            mem_mib=int(snapshot.free_mem_mib[i]),
            storage_gib=int(snapshot.free_storage_gib[i]),
            accelerators={m: int(snapshot.free_acc[i, c]) for c, m in enumerate(self.models)},
        )

    def free_mbps_at(self, snapshot: Snapshot, link_id: str) -> int:
        """What link `link_id` has free in `snapshot`, in Mbps (0 for a link not on the map)."""
        j = self.link_index.get(link_id)
        return 0 if j is None else max(0, int(snapshot.residual_mbps[j]))

    def order(self, rows: IntArray) -> IntArray:
        """`rows` in `fair_order` given the usage now (module docstring). Ids are the rows,
        zero-padded, so that rows of one tenant arriving together keep their row order."""
        queued = [self.queued(row) for row in rows.tolist()]
        ordered = fair_order(queued, classes=self.classes, usage=self.usage, capacity=self.capacity)
        return np.fromiter((id_row(w.id) for w in ordered), dtype=np.int64, count=len(ordered))
