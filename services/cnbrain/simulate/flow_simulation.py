"""A simulation of jobs that move data, planned over time on calendars of compute and links.

The simulator's other mode (`cnbrain.simulate.simulation`) places each job at an instant and
holds a constant bandwidth for its life. Here every job is planned at its arrival, on one
`Calendar` of the map's compute and link bandwidth (`CalendarKeys`), as an advance
reservation:

1. **Candidates.** The engine ranks the sites that pass its filters on the empty map (its
   objective: cost, energy, latency, balance). The baselines keep the best `top_n` (None:
   all); `scarcity` keeps the best `top_n` by `flow_choice.candidates`, against the
   calendar.
2. **Options.** Each candidate site gives one option per rate step (`flow_options`): its
   compute over the run, its staging before the start, its delivery after the end, its
   serving and continuous bandwidth over the run, each on its own route.
3. **Starts.** Each option gets its earliest start within `[arrival, arrival + max_wait_s]`
   at which every part fits (`TimedDemand.earliest`); options with none are out.
4. **Choice.** The policy (`FLOW_POLICIES`) picks one of them; its parts are taken on the
   calendar at its start, so every later job plans around it. A job with no option that
   starts in time is rejected, with the resource that stopped it (`blocker`).

**Windows of arrivals.** Jobs that arrive in the same second, or with `batch_window_s` > 0
within that many seconds of the first of them, are planned together (at the window's end):
the baselines in arrival order, `scarcity` in order of the job's dominant share (its largest
share of a compute resource over its eligible sites' capacity), largest first, so that the
jobs that are hardest to fit later go first. A job's deadline is its arrival plus its wait.

Jobs run exactly their duration, so a reservation is never given back early. Offered load
divides arrival times by `load`. The calendar never holds more than a resource's capacity
(it refuses, and the run would raise), and an option's compute starts when its staging
window ends. The same inputs give the same outcomes (`random` draws from `seed`).

With `quality=True`, each decision of the run is also made over every eligible site (the
exact search) on the same calendar, and the outcome records the relative gap between the
two choices' scores (`FlowOutcome.quality_gap`: 0 when the Top-N held the best option;
None for a job with at most `top_n` eligible sites, whose choice is the exact one).
"""

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Final

import numpy as np

from cnbrain.domain.enums import LinkLayer, WorkloadClass
from cnbrain.domain.flows import Flows
from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.calendar import Calendar
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import MapArrays
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.batch import RequestBatch
from cnbrain.placement.engine import PlacementEngine
from cnbrain.placement.objective import compute_cost, energy
from cnbrain.placement.registry import EngineConfig
from cnbrain.placement.request_check import check_flows
from cnbrain.scheduling import flow_choice
from cnbrain.scheduling.flow_choice import Timed, feasible
from cnbrain.scheduling.flow_options import (
    FlowJob,
    FlowOption,
    FlowRoutes,
    flow_options,
    least_lead,
)
from cnbrain.scheduling.options import CalendarKeys, compute_amounts
from cnbrain.simulate.trace import TraceJob

FLOW_POLICIES: Final = ("scarcity", "earliest", "ranked", "random")
"""`scarcity` is ours (`flow_choice.scarcity`, the brains' rule for requests with flows);
`earliest` is the admission planner's rule for work without flows,
`ranked` the engine's objective alone, `random` a seeded draw among the feasible options."""

DEFAULT_TOP_N: Final = 8
RANK_CHUNK: Final = 1000


@dataclass(frozen=True, slots=True)
class FlowOutcome:
    """What became of one job. Accepted: its `site`, `start_s` (trace seconds), the rate
    step of its transfers, how long its staging ran before the start (`staging_s`) and its
    delivery after the end (`delivery_s`), the accelerator-hours it was served, its cost
    (compute and bandwidth, CNY) and energy (kWh, PUE included). Rejected: `blocker`, the
    kind of resource that stopped it, and `where`, that resource."""

    job_id: str
    accepted: bool
    site: str | None = None
    start_s: float | None = None
    wait_s: float = 0.0
    step: float | None = None
    staging_s: int = 0
    delivery_s: int = 0
    accelerator_hours: float = 0.0
    cost_cny: float = 0.0
    energy_kwh: float = 0.0
    blocker: str | None = None
    where: str | None = None
    quality_gap: float | None = None


@dataclass(frozen=True, slots=True)
class FlowRun:
    """One run: `policy` at `load`, its outcomes in input order, and its wall time."""

    policy: str
    load: float
    outcomes: tuple[FlowOutcome, ...]
    wall_s: float

    @property
    def accelerator_hours(self) -> float:
        return sum(o.accelerator_hours for o in self.outcomes)

    @property
    def accepted(self) -> int:
        return sum(o.accepted for o in self.outcomes)

    @property
    def cost_cny(self) -> float:
        return sum(o.cost_cny for o in self.outcomes)

    @property
    def energy_kwh(self) -> float:
        return sum(o.energy_kwh for o in self.outcomes)

    def blockers(self) -> Counter[str]:
        return Counter(o.blocker for o in self.outcomes if o.blocker is not None)

    def where(self) -> Counter[str]:
        return Counter(o.where for o in self.outcomes if o.where is not None)


Chooser = Callable[[Calendar[int], Sequence[Timed], int, Mapping[int, float]], Timed | None]


def _chooser(policy: str, seed: int) -> Chooser:
    if policy == "scarcity":
        return lambda calendar, timed, duration, objective: flow_choice.scarcity(
            calendar, timed, duration=duration, objective=objective
        )
    if policy == "earliest":
        return lambda calendar, timed, duration, objective: flow_choice.earliest(timed)
    if policy == "ranked":
        return lambda calendar, timed, duration, objective: flow_choice.ranked(timed)
    if policy == "random":
        rng = random.Random(seed)
        return lambda calendar, timed, duration, objective: rng.choice(timed) if timed else None
    raise ValueError(f"unknown flow policy {policy!r}; known: {', '.join(FLOW_POLICIES)}")


def simulate_flows(
    cmap: ComputeNetworkMap,
    jobs: Sequence[TraceJob],
    *,
    policy: str,
    load: float = 1.0,
    seed: int = 0,
    max_wait_s: float = 1800.0,
    waits: Mapping[WorkloadClass, float] | None = None,
    top_n: int | None = DEFAULT_TOP_N,
    quality: bool = False,
    whole_life: bool = False,
    batch_window_s: float = 0.0,
) -> FlowRun:
    """Plan `jobs` on `cmap` with `policy` at `load` (module docstring); a job may wait
    `max_wait_s` to start, or its class's wait in `waits` when it names one. Raises ValueError
    for an unknown policy or a load that is not positive and finite, `Invalid` for a flow
    naming a site or province the map lacks. `whole_life` plans with the model without
    windows (`flow_options`), for comparison."""
    if not (math.isfinite(load) and load > 0):
        raise ValueError(f"load must be positive and finite, not {load}")
    if not (math.isfinite(batch_window_s) and batch_window_s >= 0):
        raise ValueError(f"batch_window_s must be finite and at least 0, not {batch_window_s}")
    began = time.perf_counter()
    choose = _chooser(policy, seed)
    engine = PlacementEngine(cmap, config=EngineConfig(seed=seed))
    arrays = engine.arrays
    keys = CalendarKeys(arrays)
    routes = FlowRoutes(arrays, engine.router, keys)
    requests, batch = _checked(jobs, arrays, engine)
    everywhere = arrays.n_sites
    ranked = _ranked(engine, requests, n=everywhere)
    calendar: Calendar[int] = Calendar(keys.capacities(), now=0)
    arrivals = [math.floor(job.arrival_s / load) for job in jobs]
    order = sorted(range(len(jobs)), key=lambda i: (arrivals[i], jobs[i].id))
    outcomes: list[FlowOutcome | None] = [None] * len(jobs)
    for now, rows in _windows(order, arrivals, batch_window_s):
        calendar.advance(max(now, calendar.now))
        if policy == "scarcity" and len(rows) > 1:
            share = {row: _dominant_share(batch, row, ranked[row], arrays) for row in rows}
            rows = sorted(rows, key=lambda row: -share[row])
        for row in rows:
            job = jobs[row]
            flow_job = _flow_job(job, row, batch, keys)
            wait = max_wait_s if waits is None else waits.get(job.workload_class, max_wait_s)
            deadline = arrivals[row] + math.floor(wait)
            if policy == "scarcity":
                sites = flow_choice.candidates(
                    calendar,
                    ranked[row],
                    flow_job.compute,
                    lead=partial(least_lead, flow_job, routes=routes),
                    site_key=keys.site,
                    start=now,
                    deadline=deadline,
                    duration=flow_job.duration,
                    n=top_n,
                )
            else:
                sites = ranked[row] if top_n is None else ranked[row][:top_n]
            objective = dict(sites)
            options = [
                o
                for site, _ in sites
                for o in flow_options(flow_job, site, routes, whole_life=whole_life)
            ]
            timed = feasible(options, calendar, not_before=now, deadline=deadline)
            chosen = choose(calendar, timed, flow_job.duration, objective)
            if chosen is None:
                blocker, where = _blocker(
                    calendar, options, now, deadline, arrays_map=cmap, keys=keys
                )
                outcomes[row] = FlowOutcome(job.id, False, blocker=blocker, where=where)
                continue
            gap = None
            if quality and top_n is not None and len(ranked[row]) > top_n:
                gap = _quality_gap(calendar, chosen, flow_job, ranked[row], routes, now, deadline)
            chosen.option.demand.take(calendar, chosen.start)
            outcomes[row] = _accepted(job, row, chosen, batch, engine, arrivals[row], gap)
    done = [o for o in outcomes if o is not None]
    return FlowRun(policy, load, tuple(done), time.perf_counter() - began)


def check_jobs(cmap: ComputeNetworkMap, jobs: Sequence[TraceJob]) -> None:
    """Raises `RequestError` or `Invalid`, naming the field, for the first job `cmap` cannot
    plan: a request the engine refuses, or a flow end the map lacks."""
    engine = PlacementEngine(cmap)
    _checked(jobs, engine.arrays, engine)


def _checked(
    jobs: Sequence[TraceJob], arrays: MapArrays, engine: PlacementEngine
) -> tuple[list[PlacementRequest], RequestBatch]:
    requests = [job.to_request() for job in jobs]
    for job in jobs:
        if job.flows is not None:
            check_flows(arrays.map, job.flows)
    return requests, RequestBatch.build(requests, arrays, engine.config.weight_matrix)


def _windows(
    order: Sequence[int], arrivals: Sequence[int], window_s: float
) -> Iterator[tuple[int, list[int]]]:
    """The rows of `order` (by arrival) in planning windows, each with the second it is
    planned: the arrivals of one second, or with `window_s` > 0 those within `window_s` of
    the first, planned at the window's end."""
    i = 0
    while i < len(order):
        first = arrivals[order[i]]
        end = first + math.floor(window_s)
        j = i
        while j < len(order) and (
            arrivals[order[j]] == first or (window_s > 0 and arrivals[order[j]] < end)
        ):
            j += 1
        yield (end if window_s > 0 else first), list(order[i:j])
        i = j


def _dominant_share(
    batch: RequestBatch, row: int, eligible: Sequence[tuple[int, float]], arrays: MapArrays
) -> float:
    """The job's largest share of a compute resource over its eligible sites' capacity."""
    sites = np.asarray([site for site, _ in eligible], dtype=np.int64)
    if not len(sites):
        return 0.0
    shares = [
        batch.cpu_m[row] / max(1, int(arrays.cap_cpu_m[sites].sum())),
        batch.mem_mib[row] / max(1, int(arrays.cap_mem_mib[sites].sum())),
    ]
    if batch.acc_milli[row] > 0:
        column = int(batch.acc_column[row])
        shares.append(batch.acc_milli[row] / max(1, int(arrays.cap_acc[sites, column].sum())))
    return float(max(shares))


def _ranked(
    engine: PlacementEngine, requests: Sequence[PlacementRequest], *, n: int
) -> list[list[tuple[int, float]]]:
    """Per request, the sites that pass the engine's filters on the empty map with their
    objective values, best first."""
    empty = Snapshot.empty(engine.arrays)
    out: list[list[tuple[int, float]]] = []
    reqs = list(requests)
    for lo in range(0, len(reqs), RANK_CHUNK):
        answers = engine.rank_sites_many(reqs[lo : lo + RANK_CHUNK], snapshot=empty, n=n)
        out.extend(sites for sites, _ in answers)
    return out


def _flow_job(job: TraceJob, row: int, batch: RequestBatch, keys: CalendarKeys) -> FlowJob:
    return FlowJob(
        id=job.id,
        compute=tuple(compute_amounts(batch, row, keys)),
        duration=max(1, math.ceil(job.duration_s)),
        access_node=batch.access_nodes[row],
        flows=job.flows or Flows(),
        continuous_mbps=int(batch.need_mbps[row]),
        max_latency_ms=float(batch.max_latency_ms[row]),
    )


def _accepted(
    job: TraceJob,
    row: int,
    chosen: Timed,
    batch: RequestBatch,
    engine: PlacementEngine,
    arrival: int,
    gap: float | None,
) -> FlowOutcome:
    arrays = engine.arrays
    option = chosen.option
    r = np.asarray([row])
    j = np.asarray([option.site])
    compute = float(compute_cost(batch, arrays, r, j)[0])
    kwh = float(energy(batch, arrays, r, j)[0][0])
    bandwidth = sum(
        leg.mbps / 1000 * float(arrays.link_cost[leg.route.link_array].sum()) * leg.duration / 3600
        for leg in option.legs
    )
    hours = job.duration_s / 3600
    return FlowOutcome(
        job.id,
        True,
        site=arrays.map.sites[option.site].id,
        start_s=float(chosen.start),
        wait_s=float(chosen.start - arrival),
        step=option.step,
        staging_s=option.lead,
        delivery_s=option.tail,
        accelerator_hours=job.accelerators * hours if job.accelerator_model else 0.0,
        cost_cny=compute + bandwidth,
        energy_kwh=kwh,
        quality_gap=gap,
    )


def _quality_gap(
    calendar: Calendar[int],
    chosen: Timed,
    job: FlowJob,
    every_site: Sequence[tuple[int, float]],
    routes: FlowRoutes[CalendarKeys],
    now: int,
    deadline: int,
) -> float:
    """The relative gap between the score of `chosen` and of the best option over every
    eligible site, both by the scarcity rule's score on the same calendar."""
    every = dict(every_site)
    options = [o for site in every for o in flow_options(job, site, routes)]
    timed = feasible(options, calendar, not_before=now, deadline=deadline)
    best = flow_choice.scarcity(calendar, timed, duration=job.duration, objective=every)
    assert best is not None
    first = min(t.start for t in timed)
    mine = flow_choice.scarcity_score(
        calendar, chosen, first_start=first, duration=job.duration, objective=every
    )
    exact = flow_choice.scarcity_score(
        calendar, best, first_start=first, duration=job.duration, objective=every
    )
    return (mine - exact) / max(exact, 1e-9) if mine > exact else 0.0


def _blocker(
    calendar: Calendar[int],
    options: Sequence[FlowOption],
    now: int,
    deadline: int,
    *,
    arrays_map: ComputeNetworkMap,
    keys: CalendarKeys,
) -> tuple[str, str]:
    """The kind of resource that stopped a job and the one that did, by the first option (the
    best-ranked site at full rate): its first part with no room by the deadline on its own;
    `joint` when each part fits alone but never all together; `route` when no site had an
    option (no route within a latency bound); `staging` when no option's data could arrive
    by the deadline even on empty links."""
    if not options:
        return "route", "no site within the latency bounds"
    if all(now + o.demand.lead > deadline for o in options):
        return "staging", "its data cannot arrive within its wait"
    option = options[0]
    for part in option.demand.parts:
        profile = calendar.profile(part.key)
        fit = profile.earliest(
            part.amount,
            part.duration,
            not_before=now + option.demand.lead + part.offset,
            deadline=deadline + part.offset,
        )
        if fit is None:
            return _resource(part.key, arrays_map, keys)
    return "joint", arrays_map.sites[option.site].id


def _resource(key: int, cmap: ComputeNetworkMap, keys: CalendarKeys) -> tuple[str, str]:
    link_index = keys.link_of(key)
    if link_index is not None:
        link = cmap.links[link_index]
        kind = {LinkLayer.BACKBONE: "backbone link"}.get(link.layer, f"{link.layer.value} link")
        return kind, link.id
    site, dimension = keys.site_of(key)
    if dimension >= keys.ACCELERATORS:
        model = cmap.accelerator_models[dimension - keys.ACCELERATORS]
        return "accelerators", f"{model} at {cmap.sites[site].id}"
    kind = {keys.CPU_M: "cpu", keys.MEM_MIB: "memory", keys.STORAGE_GIB: "storage"}[dimension]
    return kind, cmap.sites[site].id
