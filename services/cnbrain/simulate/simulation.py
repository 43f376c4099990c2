"""A discrete-event simulation of one policy at one offered load, on the placement engine.

The clock is simulated: a heap of events, processed in time order; nothing sleeps.

**Load.** Every arrival time is divided by `load` (load 2 offers jobs twice as fast); durations
are unchanged.

**One engine per run.** A fresh `PlacementEngine` (one ledger) serves the whole run, with
`EngineConfig(seed=seed)` unless a config is given (its seed is replaced by `seed`).

**Events at one instant** are handled in this order: departures (each releases its job's
reservation at once), then one retry round if anything departed, then arrivals, then the
arrival batch, then the periodic retry, then queue time-outs, then samples.

**Arrivals** that fall at the same instant (or, with `batch_window_s > 0`, within the window
opened by the first of them, placed at the window's end) are placed together with one
`place_batch` call.

**Which rejected jobs wait.** The engine's filters with code `unschedulable_and_unresolvable`
depend on the map and the request only; `capacity` (code `unschedulable`) on free capacity
(see `cnbrain.simulate.eligibility`). The rule:

- a job that no site could ever take (its unresolvable filters leave no site, or it is larger
  than the total capacity of every site they leave) is rejected at arrival, reason
  `never_fits`;
- any other job that is not placed waits in a FIFO queue: when no eligible site has free
  capacity for it now, or when the engine rejected it (capacity went to others of its batch,
  or no path has the bandwidth it asks). It leaves the queue when placed, or is rejected with
  reason `queue_timeout` at its arrival plus its queue limit (`queue_limit_s`, or with
  priority classes its class's max wait).

**Retries.** A retry round runs at every departure and every `retry_every_s` while jobs wait.
With `backfill` admission, a round woken by a departure or a preemption runs `round_gap_s`
(default 1 s) after the one before it at the earliest, like the regional brain's admission
loop: it runs its rounds one after another, woken by freed capacity, and a round over a
queue of thousands takes it about a second (`cnbrain bench admission`); departures in
between are all seen by that round. `round_gap_s` 0 runs a round at every departure.
It walks the queue in arrival order (no head-of-line blocking: a later job may take capacity
an earlier one cannot use) and asks the engine, one job at a time, for each job that could
fit now. Skipped, because the engine would reject them:

- a job with nothing released since its last attempt (free capacity and bandwidth only
  shrank since), and a job whose last attempt found no free capacity on any eligible site
  when none of its eligible sites released anything since;
- a job that no eligible site with the free capacity can take now, or none that a path with
  its bandwidth free reaches within its bound (`Eligibility.fit_matrix`: the engine's
  feasible set, narrowed by a lower bound on route latency, `cnbrain.simulate.reach`);
- at one ledger version, a job no better off than one the engine just failed to route
  (`cnbrain.simulate.no_path`).

Arrivals go through the same checks before their batch is sent to the engine.

**Admission** (`admission`, `cnbrain.simulate.admission`): the order in which a retry round
looks at the jobs: `retry` (the default) is arrival order, as above; `fair` is the
scheduling core's `fair_order` (class, weighted DRF between the trace's tenants, equal
weights, then age), taken afresh at every round; `backfill` runs the scheduling core's
`admission_round` over the whole queue and looks only at the jobs it admits now
(`cnbrain.simulate.backfill_round`). The engine still places each job.

**Priority classes and preemption** (`priority_classes`, `cnbrain.simulate.classes`): each
job's queue limit is its class's max wait. With `backfill` admission the run preempts: when
a round names preemptions, each victim releases its reservation at once and goes back to
the queue (its queue limit counted again from the preemption, its age in the order still its
arrival's, its work lost: placed again, it runs its whole duration), and a retry round
follows at the same instant, where the preemptor may be placed. Whether a job is stuck
depends on its deadline, not on a release, so while the run preempts a round also runs when
a job entered the queue since the last one. The departure of a preempted stay, and the
time-out of an earlier queue stay, are ignored. A preemption frees what the stuck job's
option lacks now, compute on its site and bandwidth on the links of its path (the round's
`free_now` and `free_bandwidth_now` are the ledger's free compute at the site and residual
bandwidth of each link; each running job holds its reservation's Mbps on its path): a job
stuck for bandwidth gets as victims the lower-class jobs holding the full links, wherever
they run.

**Departures.** A placed job departs `duration_s` after its start; its reservation is released
at once.

**Determinism.** The same map, jobs, policy, load, seed and options give the same outcomes:
ties are broken by event kind, then by the order events were scheduled, and the engine's
strategies are deterministic for a seed (CP-SAT runs on deterministic time, one worker).
"""

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from enum import IntEnum
from typing import Any

import numpy as np

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.netmap.arrays import IntArray
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.registry import STRATEGIES, EngineConfig
from cnbrain.scheduling.admission import Preemption
from cnbrain.scheduling.classes import BUILT_IN
from cnbrain.scheduling.resources import Resources
from cnbrain.simulate.admission import ONE_CLASS_SET, Admission, FairQueue, checked_admission
from cnbrain.simulate.backfill_round import BackfillPlanner, Held, id_row
from cnbrain.simulate.eligibility import BoolArray, Eligibility, any_site
from cnbrain.simulate.metrics import take_sample
from cnbrain.simulate.no_path import NoPathMemo, site_limit
from cnbrain.simulate.records import (
    JobOutcome,
    JobStatus,
    RejectReason,
    Sample,
    SimulationResult,
)
from cnbrain.simulate.trace import TraceJob

DEFAULT_SAMPLES = 100

DEFAULT_ROUND_GAP_S = 1.0
"""With `backfill` admission, the least time between two retry rounds (module docstring)."""

MAX_ROUND_GAP_S = 3600.0
"""The longest round gap taken."""

NO_FREE_CAPACITY = "no eligible site has enough free CPU, memory, storage or accelerators"
NO_ROUTE = (
    "no path to an eligible site with free capacity has the requested bandwidth free on "
    "every link within the latency bound"
)


class ConservationError(AssertionError):
    """The run broke conservation: a job without an end state, or a reservation kept."""


class _Kind(IntEnum):
    """Event kinds, in the order they are handled at one instant."""

    DEPART = 0
    RETRY = 1
    ARRIVE = 2
    FLUSH = 3
    TICK = 4
    EXPIRE = 5
    SAMPLE = 6


def simulate(
    cmap: ComputeNetworkMap,
    jobs: Sequence[TraceJob],
    *,
    policy: str,
    load: float,
    seed: int,
    queue_limit_s: float = 1800,
    retry_every_s: float = 60,
    round_gap_s: float = DEFAULT_ROUND_GAP_S,
    batch_window_s: float = 0,
    horizon_s: float | None = None,
    samples: int = DEFAULT_SAMPLES,
    config: EngineConfig | None = None,
    admission: str = Admission.RETRY,
    priority_classes: Sequence[str] | None = None,
) -> SimulationResult:
    """Replay `jobs` on `cmap` with `policy` at offered `load` (see the module docstring).

    `priority_classes`, when given, names each job's class of `cnbrain.simulate.classes.
    BUILT_IN` (in `jobs`' order; `draw_classes` draws them): each job's queue limit is then
    its class's max wait, and with `backfill` admission higher classes preempt (module
    docstring); without it every job is in one class and waits at most `queue_limit_s`.

    `round_gap_s` (within [0, 3600]) is the least time between two rounds of `backfill`
    admission woken by a departure or a preemption.

    Samples are taken at `samples` evenly spaced instants from 0 to the last (scaled) arrival,
    or to `horizon_s` when that is earlier. With `horizon_s` the clock stops there: jobs
    queued then, and jobs arriving later, end as `waiting`; placed jobs count as accepted.

    Raises ValueError for a bad option, an unknown policy, admission or class, or a class
    list whose length is not the number of jobs; RequestError when a job names something the
    map lacks; ConservationError if the run breaks conservation (a
    bug).
    """
    if policy not in STRATEGIES:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(STRATEGIES)}")
    chosen = checked_admission(admission)
    if not (load > 0 and math.isfinite(load)):
        raise ValueError(f"load must be a positive number, not {load!r}")
    if queue_limit_s < 0 or batch_window_s < 0 or retry_every_s <= 0 or samples < 1:
        raise ValueError(
            "need queue_limit_s >= 0, batch_window_s >= 0, retry_every_s > 0, samples >= 1"
        )
    if not 0 <= round_gap_s <= MAX_ROUND_GAP_S:
        raise ValueError(
            f"round_gap_s must be within [0, {MAX_ROUND_GAP_S:g}], not {round_gap_s!r}"
        )
    if priority_classes is not None:
        if len(priority_classes) != len(jobs):
            raise ValueError(f"{len(priority_classes)} classes given for {len(jobs)} jobs")
        unknown = sorted(set(priority_classes) - {one.name for one in BUILT_IN})
        if unknown:
            raise ValueError(f"unknown class {', '.join(unknown)}")
    run = _Run(
        cmap,
        jobs,
        policy=policy,
        load=load,
        seed=seed,
        queue_limit_s=queue_limit_s,
        retry_every_s=retry_every_s,
        round_gap_s=round_gap_s,
        batch_window_s=batch_window_s,
        config=replace(config or EngineConfig(), seed=seed),
        admission=chosen,
        priority_classes=priority_classes,
    )
    return run.run(horizon_s=horizon_s, samples=samples)


class _Run:
    """The state of one run. Rows index `jobs` in input order."""

    def __init__(
        self,
        cmap: ComputeNetworkMap,
        jobs: Sequence[TraceJob],
        *,
        policy: str,
        load: float,
        seed: int,
        queue_limit_s: float,
        retry_every_s: float,
        round_gap_s: float,
        batch_window_s: float,
        config: EngineConfig,
        admission: Admission,
        priority_classes: Sequence[str] | None,
    ) -> None:
        self.started = time.perf_counter()
        self.cmap, self.jobs, self.policy = cmap, list(jobs), policy
        self.load, self.seed = load, seed
        self.queue_limit_s, self.retry_every_s = queue_limit_s, retry_every_s
        self.round_gap_s = round_gap_s if admission is Admission.BACKFILL else 0.0
        """Seconds at least between the start of a retry round and the next one woken by a
        departure or a preemption (`backfill` admission only)."""
        self.last_round = -math.inf
        """When the last retry round ran."""
        self.batch_window_s = batch_window_s
        self.engine = PlacementEngine(cmap, config=config)
        self.requests = [job.to_request() for job in self.jobs]
        self.eligibility = Eligibility.of(self.engine, self.requests)
        self.memo = NoPathMemo(
            self.eligibility,
            [job.max_latency_ms or math.inf for job in self.jobs],
            site_limit(policy, config),
        )
        self.arrival = [job.arrival_s / load for job in self.jobs]
        self.admission = admission
        self.class_names = None if priority_classes is None else list(priority_classes)
        self.limit = (
            [queue_limit_s] * len(self.jobs)
            if self.class_names is None
            else [BUILT_IN.get(name).default_max_wait_s for name in self.class_names]
        )
        """Per row: how long it may wait in the queue."""
        self.preemptive = self.class_names is not None and admission is Admission.BACKFILL
        """Whether the run preempts: with classes and `backfill` admission."""
        self.fair = (
            FairQueue(
                self.engine.arrays,
                self.eligibility,
                [j.tenant for j in self.jobs],
                self.arrival,
                classes=ONE_CLASS_SET if self.class_names is None else BUILT_IN,
                class_names=self.class_names,
            )
            if admission in (Admission.FAIR, Admission.BACKFILL)
            else None
        )
        """With `fair` or `backfill` admission: the order of a round, each tenant's usage."""
        self.backfill = (
            BackfillPlanner(
                self.engine,
                self.requests,
                durations=[job.duration_s for job in self.jobs],
                deadlines=[at + limit for at, limit in zip(self.arrival, self.limit, strict=True)],
                top_n=config.top_n,
                classes=self.fair.classes,
                capacity=self.fair.capacity,
            )
            if admission is Admission.BACKFILL and self.fair is not None
            else None
        )
        self.outcomes: list[JobOutcome | None] = [None] * len(self.jobs)
        self.queue: dict[int, str] = {}
        """Waiting rows in arrival order, each with why its last attempt failed."""
        self.tried = np.zeros(len(self.jobs), dtype=np.int64)
        """Per row: the epoch of its last attempt."""
        self.compute_blocked = np.zeros(len(self.jobs), dtype=bool)
        """Per row: its last attempt found no eligible site with the free capacity."""
        self.running: dict[int, tuple[str, int]] = {}
        """Per running row: its reservation's id and its site's index."""
        self.departs: dict[int, int] = {}
        self.expires: dict[int, int] = {}
        """Per row: the sequence number of its live departure (expiry) event; an event of an
        earlier stay (before a preemption) is stale and ignored."""
        self.preempted = [0] * len(self.jobs)
        """Per row: how many times it was preempted."""
        self.ran_before = [0.0] * len(self.jobs)
        """Per row: seconds it ran before its preemptions (work lost, done again)."""
        self.queue_changed = False
        """With preemption: a job entered the queue since the last round."""
        self.released_at = np.zeros(len(cmap.sites), dtype=np.int64)
        """Per site: the epoch of its last release."""
        self.pending: list[int] = []
        self.epoch = 0
        self.round_epoch = 0
        self.flush_scheduled = False
        self.retry_scheduled = False
        self.tick_scheduled = False
        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.engine_calls = 0
        self.samples: list[Sample] = []
        self.accepted = 0
        self.rejected = 0
        self.last_change = 0.0

    def push(self, at: float, kind: _Kind, row: int = -1) -> int:
        """Schedule an event; its sequence number."""
        heapq.heappush(self.heap, (at, int(kind), self.seq, row))
        self.seq += 1
        return self.seq - 1

    def run(self, *, horizon_s: float | None, samples: int) -> SimulationResult:
        order = sorted(range(len(self.jobs)), key=lambda row: (self.arrival[row], row))
        for row in order:
            self.push(self.arrival[row], _Kind.ARRIVE, row)
        last = max(self.arrival, default=0.0)
        span = last if horizon_s is None else min(last, horizon_s)
        for at in sorted(set(np.linspace(0.0, span, samples).tolist())):
            self.push(at, _Kind.SAMPLE)
        while self.heap:
            at, kind, seq, row = self.heap[0]
            if horizon_s is not None and at > horizon_s:
                break
            heapq.heappop(self.heap)
            if self.live(_Kind(kind), seq, row):
                self.handle(_Kind(kind), row, at)
        finished = not self.heap
        end = self.last_change if finished or horizon_s is None else horizon_s
        return self.result(end, finished=finished)

    def live(self, kind: _Kind, seq: int, row: int) -> bool:
        """Whether event `seq` still stands: a departure or expiry of an earlier stay of a
        preempted row does not."""
        if kind is _Kind.DEPART:
            return self.departs.get(row) == seq
        if kind is _Kind.EXPIRE:
            return self.expires.get(row) == seq
        return True

    def handle(self, kind: _Kind, row: int, now: float) -> None:
        if kind in (_Kind.DEPART, _Kind.FLUSH):
            self.last_change = now
        if kind is _Kind.DEPART:
            del self.departs[row]
            self.release(row, now)
            self.schedule_retry(now)
        elif kind is _Kind.RETRY:
            self.retry_scheduled = False
            self.retry_round(now)
        elif kind is _Kind.ARRIVE:
            self.pending.append(row)
            if not self.flush_scheduled:
                self.flush_scheduled = True
                self.push(now + self.batch_window_s, _Kind.FLUSH)
        elif kind is _Kind.FLUSH:
            batch, self.pending, self.flush_scheduled = self.pending, [], False
            self.place_arrivals(batch, now)
        elif kind is _Kind.TICK:
            self.tick_scheduled = False
            self.retry_round(now)
            self.schedule_tick(now)
        elif kind is _Kind.EXPIRE:
            detail = self.queue.pop(row, None)
            if detail is not None:
                self.last_change = now
                self.reject(row, RejectReason.QUEUE_TIMEOUT, detail)
        else:
            self.samples.append(
                take_sample(
                    now,
                    self.engine.ledger.snapshot(),
                    self.eligibility,
                    waiting=list(self.queue),
                    accepted=self.accepted,
                    rejected=self.rejected,
                    running=len(self.running),
                )
            )

    def place_arrivals(self, rows: list[int], now: float) -> None:
        reasons = self.eligibility.never_fits_reason
        for row in rows:
            reason = reasons[row]
            if reason is not None:
                self.reject(row, RejectReason.NEVER_FITS, reason)
        rows = [row for row in rows if reasons[row] is None]
        if not rows:
            return
        compute, sites = self.fit(rows)
        fits, computes = any_site(sites).tolist(), any_site(compute).tolist()
        version = self.engine.ledger.version
        ask: list[int] = []
        for k, row in enumerate(rows):
            self.tried[row] = self.epoch
            self.compute_blocked[row] = not computes[k]
            if not fits[k]:
                self.enqueue(row, now, NO_ROUTE if computes[k] else NO_FREE_CAPACITY)
            elif (memo := self.memo.rejection(version, row, sites[k])) is not None:
                self.enqueue(row, now, memo)
            else:
                ask.append(row)
        decisions = self.decide(ask)
        for k, row in enumerate(rows):
            if row not in decisions or self.maybe_start(row, decisions[row], now):
                continue
            detail = decisions[row].reason or NO_FREE_CAPACITY
            if len(ask) == 1:
                self.memo.record(version, row, sites[k], detail)
            self.enqueue(row, now, detail)

    def fit(self, rows: list[int]) -> tuple[BoolArray, BoolArray]:
        """For `rows`: eligible sites with the free capacity, and those a path reaches too."""
        snapshot, index = self.engine.ledger.snapshot(), np.asarray(rows)
        compute = self.eligibility.compute_fit(snapshot, index)
        return compute, self.eligibility.routed(snapshot, index, compute)

    def decide(self, rows: list[int]) -> dict[int, Decision]:
        if not rows:
            return {}
        self.engine_calls += 1
        decisions = self.engine.place_batch([self.requests[r] for r in rows], policy=self.policy)
        return dict(zip(rows, decisions, strict=True))

    def retry_round(self, now: float) -> None:
        """Place waiting jobs, in admission order, one at a time (see the module docstring).

        Every job looked at is marked tried at this epoch. A job that last failed for compute
        alone is looked at only if an eligible site of its released something since. After a
        placement only the jobs after it are looked at again: capacity has only shrunk for
        those before it."""
        if self.epoch == self.round_epoch and not self.queue_changed:
            return
        self.queue_changed = False
        self.last_round = now
        rows = self.retry_candidates()
        preemptions: list[Preemption] = []
        if self.backfill is not None:
            rows, preemptions = self.admitted_now(rows, now)
        elif self.fair is not None:
            rows = self.fair.order(rows)
        while len(rows):
            compute, sites = self.fit(rows.tolist())
            fits = any_site(sites)
            version = self.engine.ledger.version
            placed = len(rows)
            for k in np.flatnonzero(fits).tolist():
                row = int(rows[k])
                memo = self.memo.rejection(version, row, sites[k])
                if memo is not None:
                    self.queue[row] = memo
                    continue
                decision = self.decide([row])[row]
                if self.maybe_start(row, decision, now):
                    del self.queue[row]
                    placed = k
                    break
                self.queue[row] = decision.reason or NO_FREE_CAPACITY
                self.memo.record(version, row, sites[k], self.queue[row])
            looked = rows[:placed]
            computes = any_site(compute[:placed])
            self.tried[looked] = self.epoch
            self.compute_blocked[looked] = ~computes
            for k in np.flatnonzero(~fits[:placed]).tolist():
                self.queue[int(rows[k])] = NO_ROUTE if computes[k] else NO_FREE_CAPACITY
            rows = rows[placed + 1 :]
        self.round_epoch = self.epoch
        for preemption in preemptions:
            self.preempt(preemption, now)

    def admitted_now(self, rows: IntArray, now: float) -> tuple[IntArray, list[Preemption]]:
        """Of `rows`, those the admission round of the whole queue admits now, in admission
        order; and, when the run preempts, the round's preemptions."""
        assert self.backfill is not None and self.fair is not None
        fair, backfill = self.fair, self.backfill
        if not len(rows) and not self.preemptive:
            return rows, []  # the round could admit none of them
        free_now: Callable[[str], Resources] | None = None
        free_bandwidth_now: Callable[[str], int] | None = None
        if self.preemptive:
            snapshot = self.engine.ledger.snapshot()

            def free_now(site_id: str) -> Resources:
                return fair.free_at(snapshot, site_id)

            def free_bandwidth_now(link_id: str) -> int:
                return fair.free_mbps_at(snapshot, link_id)

        decided = backfill.admission(
            [fair.queued(row) for row in self.queue], now, free_now, free_bandwidth_now
        )
        admitted = np.fromiter(
            (id_row(p.id) for p in decided.admit), dtype=np.int64, count=len(decided.admit)
        )
        return admitted[np.isin(admitted, rows)], decided.preemptions

    def preempt(self, preemption: Preemption, now: float) -> None:
        """Preempt the victims of `preemption` at `now`: each releases its reservation at
        once and goes back to the queue, its work lost (done again from the start when it is
        placed again); then a retry round runs at `now`."""
        for victim in preemption.victims:
            row = id_row(victim)
            outcome = self.outcomes[row]
            assert outcome is not None and outcome.start_s is not None
            del self.departs[row]
            self.release(row, now)
            self.accepted -= 1
            self.outcomes[row] = None
            self.preempted[row] += 1
            self.ran_before[row] += now - outcome.start_s
            detail = f"preempted at {now:g} s for {id_row(preemption.preemptor)}"
            deadline = self.enqueue(row, now, detail)
            if self.backfill is not None:
                self.backfill.requeued(row, deadline)
            self.tried[row] = -1
            self.compute_blocked[row] = False
        self.schedule_retry(now)

    def release(self, row: int, now: float) -> None:
        """Running row `row` releases its reservation at `now`."""
        reservation, site = self.running.pop(row)
        if self.backfill is not None:
            self.backfill.stop(row, now)
        self.engine.release(reservation)
        if self.fair is not None:
            self.fair.departed(row)
        self.epoch += 1
        self.released_at[site] = self.epoch

    def schedule_retry(self, now: float) -> None:
        """A retry round at `now`, or `round_gap_s` after the last one if that is later, when
        jobs wait and none is scheduled yet."""
        if self.queue and not self.retry_scheduled:
            self.retry_scheduled = True
            self.push(max(now, self.last_round + self.round_gap_s), _Kind.RETRY)

    def retry_candidates(self) -> IntArray:
        """Queued rows, in arrival order, that a release since their last attempt may help;
        the others are marked tried at this epoch."""
        rows = np.fromiter(self.queue, dtype=np.int64, count=len(self.queue))
        tried = self.tried[rows]
        rows, tried = rows[tried < self.epoch], tried[tried < self.epoch]
        helped = (self.eligibility.eligible[rows] & (self.released_at > tried[:, None])).any(axis=1)
        keep = ~self.compute_blocked[rows] | helped
        self.tried[rows[~keep]] = self.epoch
        return rows[keep]

    def maybe_start(self, row: int, decision: Decision, now: float) -> bool:
        if decision.status is not DecisionStatus.PLACED or decision.reservation_id is None:
            return False
        job, outcome = self.jobs[row], decision.outcome
        self.running[row] = (decision.reservation_id, self.cmap.site_index[decision.site or ""])
        if self.fair is not None:
            self.fair.started(row)
        self.accepted += 1
        self.outcomes[row] = JobOutcome(
            job_id=job.id,
            tenant=job.tenant,
            status=JobStatus.ACCEPTED,
            arrival_s=self.arrival[row],
            start_s=now,
            end_s=now + job.duration_s,
            site=decision.site,
            cost_cny=outcome.cost_cny if outcome else 0.0,
            energy_kwh=outcome.energy_kwh if outcome else 0.0,
            carbon_kg=outcome.carbon_kg if outcome else 0.0,
            latency_ms=outcome.latency_ms if outcome else None,
            **self.job_facts(row),
        )
        self.departs[row] = self.push(now + job.duration_s, _Kind.DEPART, row)
        if self.backfill is not None and self.fair is not None:
            reservation = self.engine.ledger.reservations[decision.reservation_id]
            work = self.fair.running(
                row,
                started_at=now,
                site=self.running[row][1],
                links=reservation.links,
                mbps=reservation.mbps,
            )
            held = Held(work, self.backfill.demand(reservation), now + job.duration_s)
            self.backfill.start(row, held, now)
        return True

    def job_facts(self, row: int) -> dict[str, Any]:
        """The fields of a row's outcome that do not depend on its fate."""
        job = self.jobs[row]
        return {
            "max_latency_ms": job.max_latency_ms,
            "accelerators": job.accelerators if job.accelerator_model else 0.0,
            "priority_class": None if self.class_names is None else self.class_names[row],
            "preemptions": self.preempted[row],
            "preempted_run_s": self.ran_before[row],
        }

    def enqueue(self, row: int, now: float, detail: str) -> float:
        """Row `row` waits from `now`: until its arrival plus its queue limit, or after a
        preemption, until `now` plus its queue limit; that time-out."""
        self.queue[row] = detail
        since = self.arrival[row] if not self.preempted[row] else now
        deadline = max(now, since + self.limit[row])
        self.expires[row] = self.push(deadline, _Kind.EXPIRE, row)
        if self.preemptive:
            self.queue_changed = True
        self.schedule_tick(now)
        return deadline

    def schedule_tick(self, now: float) -> None:
        if self.queue and not self.tick_scheduled:
            self.tick_scheduled = True
            self.push(now + self.retry_every_s, _Kind.TICK)

    def reject(self, row: int, reason: RejectReason, detail: str) -> None:
        job = self.jobs[row]
        self.rejected += 1
        self.outcomes[row] = JobOutcome(
            job_id=job.id,
            tenant=job.tenant,
            status=JobStatus.REJECTED,
            arrival_s=self.arrival[row],
            reason=reason,
            detail=detail,
            **self.job_facts(row),
        )

    def result(self, now: float, *, finished: bool) -> SimulationResult:
        outcomes: list[JobOutcome] = []
        for row, outcome in enumerate(self.outcomes):
            if outcome is None:
                job = self.jobs[row]
                outcome = JobOutcome(
                    job_id=job.id,
                    tenant=job.tenant,
                    status=JobStatus.WAITING,
                    arrival_s=self.arrival[row],
                    detail=self.queue.get(row, "not arrived yet"),
                    **self.job_facts(row),
                )
            outcomes.append(outcome)
        ledger = self.engine.ledger
        ledger.check_invariants()
        held = len(ledger.reservations)
        if held != len(self.running):
            raise ConservationError(f"{held} reservations held, {len(self.running)} jobs running")
        if finished and (held or self.queue or self.pending):
            raise ConservationError("the run finished with jobs waiting or reservations held")
        return SimulationResult(
            policy=self.policy,
            load=self.load,
            seed=self.seed,
            jobs=tuple(outcomes),
            samples=tuple(self.samples),
            site_ids=tuple(site.id for site in self.cmap.sites),
            link_ids=tuple(link.id for link in self.cmap.links),
            end_s=now,
            finished=finished,
            reservations_held_at_end=held,
            engine_calls=self.engine_calls,
            wall_s=time.perf_counter() - self.started,
            admission=self.admission.value,
            preemption_modelled=self.preemptive,
        )
