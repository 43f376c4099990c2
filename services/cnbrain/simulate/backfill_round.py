"""`backfill` admission in the simulator: a retry round runs the scheduling core's admission round.

At every retry round the whole queue goes through `cnbrain.scheduling.admission.
admission_round`, the admission code the regional brain runs: the fair order (class, weighted
DRF between tenants, age), conservative backfill over a `Calendar` of the map's resources
(`cnbrain.scheduling.options.CalendarKeys`) holding every running job's remaining window (its
reservation's compute on its site and bandwidth on its path, from now to its departure), and
the sorting into admit, later, expired, impossible and stuck. That calendar is kept through
the run, not built afresh each round: a job's window is taken when it starts and given back
(from then on) when it departs or is preempted, and each round advances it to its now and
plans on a copy; from the round's now on it holds exactly what a calendar built then from the
running jobs would. The retry round then looks only at the jobs the round admits (planned
to start now), in admission order; the others are not offered to the engine in this round
(they are planned again at the next one). With preemption on (`free_now` given), the round
also names the victims of the stuck jobs whose class may preempt, for what one of their
options lacks now: compute on its site and (with `free_bandwidth_now`) bandwidth on the links
of its path, which running jobs hold wherever they run (each running job's `RunningWork`
carries its path's Mbps); the simulator acts on them (`cnbrain.simulate.simulation`).

The rest stays the simulator's: the engine (the policy under test) places each job looked at,
on the site it chooses, which may differ from the planned one; the next round plans again from
the ledger as it is. Simplifications, on purpose:

- times are whole seconds: the calendar's now is the clock rounded down, a running job's
  departure and a job's duration are rounded up, a deadline (when the job entered the queue
  plus its queue limit) down;
- a job's options are built once, on the empty map (`scheduling.options.request_options`:
  the engine's best `top_n` sites and the best route to each); a job with none is never
  planned, so it waits until its queue limit;
- arrivals are still offered to the engine at once, before the queue, as with `retry`.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.calendar import Calendar, Window
from cnbrain.ledger.reservation import Reservation
from cnbrain.placement.engine import PlacementEngine
from cnbrain.scheduling.admission import Round, Waiting, admission_round
from cnbrain.scheduling.backfill import PlanOption
from cnbrain.scheduling.classes import PriorityClasses
from cnbrain.scheduling.options import CalendarKeys, request_options
from cnbrain.scheduling.resources import Resources
from cnbrain.scheduling.work import QueuedWork, RunningWork


def row_id(row: int) -> str:
    """The id of row `row` in a round: zero-padded, so that ids sort as the rows do."""
    return f"{row:012d}"


def id_row(work_id: str) -> int:
    """The row of the id `row_id` gave."""
    return int(work_id)


@dataclass(frozen=True, slots=True)
class Held:
    """A running job as a round sees it: its `work` (for the fair order and preemption), what
    its reservation holds over calendar keys (`BackfillPlanner.demand`) and when it
    `departs`."""

    work: RunningWork
    demand: dict[int, int]
    departs: float


class BackfillPlanner:
    """Runs the admission rounds of one run. Rows index the run's jobs: `requests[row]` is a
    job's request, `durations[row]` its duration and `deadlines[row]` its latest start, in
    seconds of the simulated clock (`requeued` moves it); `classes` are the jobs' classes and
    `capacity` the map's total, for the fair order."""

    def __init__(
        self,
        engine: PlacementEngine,
        requests: Sequence[PlacementRequest],
        *,
        durations: Sequence[float],
        deadlines: Sequence[float],
        top_n: int,
        classes: PriorityClasses,
        capacity: Resources,
    ) -> None:
        self.keys = CalendarKeys(engine.arrays)
        self.capacities = self.keys.capacities()
        self.options: list[tuple[PlanOption[int], ...]] = request_options(
            engine, requests, top_n=top_n
        )
        self.durations = [max(1, math.ceil(d)) for d in durations]
        self.deadlines = [math.floor(d) for d in deadlines]
        self.classes, self.capacity = classes, capacity
        self.calendar: Calendar[int] = Calendar(self.capacities, now=0)
        """The running jobs' windows, from the calendar's now on."""
        self.held: dict[int, tuple[Held, Window]] = {}
        """Per running row: how a round sees it, and the window it holds on `calendar`."""

    def start(self, row: int, held: Held, now: float) -> None:
        """Row `row` starts at `now` and holds `held.demand` until `held.departs`; a row
        holds one window at a time. Raises CalendarConflict if the demand does not fit
        (the ledger let more run than there is)."""
        at = self._advance(now)
        window = Window(at, max(at + 1, math.ceil(held.departs)))
        self.calendar.take(held.demand, window)
        self.held[row] = (held, window)

    def stop(self, row: int, now: float) -> None:
        """Row `row` holds nothing from `now` on (it departed or was preempted); a row that
        holds nothing is left as it is."""
        entry = self.held.pop(row, None)
        if entry is None:
            return
        self._advance(now)
        held, window = entry
        self.calendar.give(held.demand, window)  # only its part from the calendar's now on

    def running(self) -> list[Held]:
        """The running rows, in the order they started."""
        return [held for held, _ in self.held.values()]

    def _advance(self, now: float) -> int:
        """Move the calendar on to `now` (rounded down; the clock does not go back); its now."""
        at = math.floor(now)
        if at > self.calendar.now:
            self.calendar.advance(at)
        return self.calendar.now

    def requeued(self, row: int, deadline: float) -> None:
        """Row `row` is back in the queue, with the latest start `deadline`."""
        self.deadlines[row] = math.floor(deadline)

    def admission(
        self,
        queued: Sequence[QueuedWork],
        now: float,
        free_now: Callable[[str], Resources] | None = None,
        free_bandwidth_now: Callable[[str], int] | None = None,
    ) -> Round:
        """One `admission_round` over `queued` (ids from `row_id`) at `now`, on a copy of the
        calendar of the running jobs (`start`, `stop`); `free_now` and `free_bandwidth_now`
        as `admission_round` takes them (None: no preemption; no link counted). `now` is
        not before the last start or stop."""
        self._advance(now)
        calendar = self.calendar.copy()
        running = self.running()
        waiting: list[Waiting[int]] = []
        for work in queued:
            row = id_row(work.id)
            waiting.append(
                Waiting(
                    work=work,
                    options=self.options[row],
                    duration=self.durations[row],
                    deadline=max(0, self.deadlines[row]),
                )
            )
        return admission_round(
            calendar,
            waiting,
            classes=self.classes,
            capacity=self.capacity,
            running=[held.work for held in running],
            free_now=free_now,
            free_bandwidth_now=free_bandwidth_now,
        )

    def demand(self, reservation: Reservation) -> dict[int, int]:
        """What `reservation` holds, over calendar keys."""
        c, keys = reservation.compute, self.keys
        amounts = {
            keys.site(c.site, keys.CPU_M): c.cpu_m,
            keys.site(c.site, keys.MEM_MIB): c.mem_mib,
            keys.site(c.site, keys.STORAGE_GIB): c.storage_gib,
        }
        if c.acc_milli > 0:
            amounts[keys.site(c.site, keys.ACCELERATORS + c.acc_column)] = c.acc_milli
        if reservation.mbps > 0:
            for link in reservation.links:
                amounts[keys.link(link)] = amounts.get(keys.link(link), 0) + reservation.mbps
        return {key: amount for key, amount in amounts.items() if amount > 0}
