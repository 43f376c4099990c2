"""`backfill` admission in the simulator: which waiting jobs a retry round may start now.

At every retry round the whole queue, in `fair_order` (`cnbrain.simulate.admission`), is
planned with the scheduling core's conservative backfill (`cnbrain.scheduling.backfill.plan`)
over a `Calendar` of the map's resources (`cnbrain.scheduling.options.CalendarKeys`) holding
every running job's remaining window: its reservation's compute on its site and bandwidth on
its path, from now to its departure. The round then looks only at the jobs whose planned start
is now, in plan order; a job planned to start later, or with no start within its queue limit,
is not offered to the engine in this round (it is planned again at the next one).

The rest stays the simulator's: the engine (the policy under test) places each job looked at,
on the site it chooses, which may differ from the planned one; the next round plans again from
the ledger as it is. Simplifications, on purpose:

- times are whole seconds: the calendar's now is the clock rounded down, a running job's
  departure and a job's duration are rounded up, a deadline (arrival plus the queue limit)
  down;
- a job's options are built once, on the empty map (`scheduling.options.request_options`:
  the engine's best `top_n` sites and the best route to each); a job with none is never
  planned, so it waits until its queue limit;
- arrivals are still offered to the engine at once, before the queue, as with `retry`.
"""

import math
from collections.abc import Iterable, Sequence

import numpy as np

from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.ledger.reservation import Reservation
from cnbrain.netmap.arrays import IntArray
from cnbrain.placement.engine import PlacementEngine
from cnbrain.scheduling.backfill import PlanItem, Planned, PlanOption, plan
from cnbrain.scheduling.options import CalendarKeys, request_options


class BackfillPlanner:
    """Plans the queue of one run. Rows index the run's jobs: `requests[row]` is a job's
    request, `durations[row]` its duration and `deadlines[row]` the latest start, in seconds
    of the simulated clock."""

    def __init__(
        self,
        engine: PlacementEngine,
        requests: Sequence[PlacementRequest],
        *,
        durations: Sequence[float],
        deadlines: Sequence[float],
        top_n: int,
    ) -> None:
        self.keys = CalendarKeys(engine.arrays)
        self.capacities = self.keys.capacities()
        self.options: list[tuple[PlanOption[int], ...]] = request_options(
            engine, requests, top_n=top_n
        )
        self.durations = [max(1, math.ceil(d)) for d in durations]
        self.deadlines = [math.floor(d) for d in deadlines]

    def starting_now(
        self, ordered: IntArray, now: float, running: Iterable[tuple[Reservation, float]]
    ) -> IntArray:
        """The rows of `ordered` (the queue in rank order) whose planned start is now, in
        that order, given the `running` reservations with their departure times."""
        at = math.floor(now)
        calendar: Calendar[int] = Calendar(self.capacities, now=at)
        for reservation, departs in running:
            calendar.take(self.demand(reservation), Window(at, max(at + 1, math.ceil(departs))))
        items = [
            PlanItem(
                id=f"{row:012d}",
                options=self.options[row],
                duration=self.durations[row],
                not_before=at,
                deadline=max(0, self.deadlines[row]),
            )
            for row in ordered.tolist()
        ]
        now_rows = [
            row
            for row, result in zip(ordered.tolist(), plan(calendar, items), strict=True)
            if isinstance(result, Planned) and result.starts_now
        ]
        return np.asarray(now_rows, dtype=np.int64)

    def demand(self, reservation: Reservation) -> dict[int, int]:
        """What `reservation` holds, over calendar keys."""
        c, keys = reservation.compute, self.keys
        amounts = {
            keys.site(c.site, keys.CPU_M): c.cpu_m,
            keys.site(c.site, keys.MEM_MIB): c.mem_mib,
            keys.site(c.site, keys.STORAGE_GIB): c.storage_gib,
        }
        if c.acc_count > 0:
            amounts[keys.site(c.site, keys.ACCELERATORS + c.acc_column)] = c.acc_count
        if reservation.mbps > 0:
            for link in reservation.links:
                amounts[keys.link(link)] = amounts.get(keys.link(link), 0) + reservation.mbps
        return {key: amount for key, amount in amounts.items() if amount > 0}
