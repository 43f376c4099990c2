"""`cnbrain bench admission`: one admission cycle (conservative backfill) over a full queue.

Steps, on one map, in one process:
1. a calendar of every site's compute (millicores, MiB, GiB, accelerators per model) and every
   link's Mbps, at a fixed `NOW`;
2. running work: `running` generated requests, each held from now for a random part of its
   duration on its first option that fits now (planned with a deadline of now; those that do
   not fit are dropped);
3. the queue: `queued` generated requests (`cnbrain.bench.workload`) of a few tenants and
   priority classes, submitted up to `MAX_AGE_S` ago, each waiting at most its class's
   default max wait;
4. the options of each request, built once and timed apart (the engine's part): the engine's
   Top-N sites for it on the empty map (its static filters, and the capacity check against
   whole capacity), each with its path (the engine's router, over links wide enough for its
   bandwidth);
5. the queue ranked by `fair_share.fair_order`, timed apart (the cycle ranks it again);
6. timed: one admission cycle, `admission.admission_round` (the brain's one admission code:
   the fair order again, conservative backfill of every queued request in that order, the
   sorting, and the victims of the stuck requests that may preempt), with the objects alive
   before it frozen out of the garbage collector's scans (`gc.freeze`), as `bench placement`
   does. With `nodes`, as the regional brain's round: the running work's gangs are held on
   the nodes of the sites with node pools (those the nodes hold), each option of a queued
   gang starts no earlier than its site's nodes hold it (`NodeWaits.options`, timed apart),
   and the cycle books on the nodes the gangs it plans to start now or that wait for their
   nodes, and starts the gangs after them only around those (`backfill.NodeBook`); victims
   are still chosen by the sites' totals alone.

The options come from `cnbrain.scheduling.options`, the bridge between the placement engine
and the calendar, and, for the share of the queue that moves data (`--flows`), from
`cnbrain.scheduling.flow_requests`: one option per candidate site (`WIDEN` times the Top-N,
of which the cycle plans each on its Top-N taken against the calendar) and rate step, its
parts each over its own window. The figures end with the process's peak resident memory.
"""

import gc
import resource
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
from numpy.random import Generator

from cnbrain.bench.workload import random_requests
from cnbrain.domain.flows import Delivery, Endpoint, Flows, Staging
from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.calendar import Calendar
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.load import load_map
from cnbrain.placement.engine import PlacementEngine
from cnbrain.regional.use_cases.node_waits import NodeWaits, gang_or_none, pools_by_site
from cnbrain.scheduling.admission import Round, Waiting, admission_round
from cnbrain.scheduling.backfill import PlanItem, Planned, plan
from cnbrain.scheduling.classes import PriorityClass, PriorityClasses
from cnbrain.scheduling.fair_share import fair_order
from cnbrain.scheduling.flow_requests import WIDEN, flow_plan_options
from cnbrain.scheduling.options import (
    CalendarKeys,
    free_now_on,
    request_demand,
    request_options,
    sites_capacity,
)
from cnbrain.scheduling.work import QueuedWork, RunningWork, usage_by_tenant

NOW = 1_800_000_000
"""The calendar's now, in epoch seconds (a fixed instant, so runs repeat)."""

MAX_AGE_S = 1800
"""A queued request was submitted up to this long before now."""

TENANT_WEIGHTS = {"tenant-a": 1.0, "tenant-b": 1.0, "tenant-c": 2.0, "tenant-d": 3.0}

CLASSES = PriorityClasses(
    [
        PriorityClass("urgent", 100, preemptible=False, default_max_wait_s=3600),
        PriorityClass("normal", 0, preemptible=True, default_max_wait_s=6 * 3600),
        PriorityClass("batch", -100, preemptible=True, default_max_wait_s=24 * 3600),
    ],
    default="normal",
)
CLASS_SHARES = {"urgent": 0.2, "normal": 0.5, "batch": 0.3}


def _duration_s(request: PlacementRequest) -> int:
    return max(1, round(request.duration_hours * 3600))


@dataclass(frozen=True, slots=True)
class AdmissionFigures:
    map: str
    sites: int
    links: int
    calendar_resources: int
    running_asked: int
    running_held: int
    queued: int
    top_n: int
    moving: int
    """Queued requests with flows."""
    options: int
    options_s: float
    """Building every request's options (the engine's ranking and routes), once."""
    nodes: bool
    """Whether gangs wait for and are booked on the sites' nodes (`bench_admission`)."""
    nodes_s: float
    """Setting when the nodes of each queued gang's options hold it (0 without `nodes`)."""
    order_s: float
    """`fair_order` of the queue."""
    cycle_s: float
    """One admission cycle: planning every queued request on the calendar (wall time)."""
    cycle_cpu_s: float
    """The same cycle's CPU time in this process (apart from other processes' load)."""
    planned_now: int
    planned_later: int
    no_start: int
    no_start_by_cause: dict[str, int]
    preemptions: int
    """Stuck requests given victims to preempt."""
    victims: int
    mean_delay_s: float
    """Mean of planned start minus now, over the planned requests (0 when none)."""
    max_delay_s: float
    peak_rss_mib: float
    """The process's peak resident memory, after the cycle."""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def bench_admission(
    spec: str,
    *,
    queued: int,
    running: int,
    seed: int,
    top_n: int = 3,
    flows: float = 0.0,
    nodes: bool = False,
) -> AdmissionFigures:
    """Run the benchmark (module docstring) on the map `spec`; a share `flows` of the queued
    requests moves data (`with_flows`); with `nodes`, gangs wait for the sites' nodes."""
    cmap = load_map(spec)
    engine = PlacementEngine(cmap)
    keys = CalendarKeys(engine.arrays)
    calendar: Calendar[int] = Calendar(keys.capacities(), now=NOW)
    rng = np.random.default_rng(seed)
    tenants = list(TENANT_WEIGHTS)

    running_requests = random_requests(cmap, count=running, seed=seed + 1_000_003)
    running_items = [
        PlanItem(
            id=request.id,
            options=options,
            duration=int(rng.integers(1, _duration_s(request) + 1)),
            not_before=NOW,
            deadline=NOW,
        )
        for request, options in zip(
            running_requests, request_options(engine, running_requests, top_n=top_n), strict=True
        )
    ]
    running_work: list[RunningWork] = []
    waits = NodeWaits(pools_by_site(engine.arrays), {}, now=NOW) if nodes else None
    class_names = list(CLASS_SHARES)
    class_p = np.asarray(list(CLASS_SHARES.values()))
    for request, item, held in zip(
        running_requests, running_items, plan(calendar, running_items), strict=True
    ):
        if isinstance(held, Planned):
            gang = gang_or_none(request)
            if waits is not None and gang is not None:
                waits.book(item.options[held.option].label, gang, held.window)
            one = CLASSES.get(class_names[int(rng.choice(len(class_names), p=class_p))])
            running_work.append(
                RunningWork(
                    id=request.id,
                    tenant=tenants[int(rng.integers(len(tenants)))],
                    class_value=one.value,
                    preemptible=one.preemptible,
                    started_at=float(NOW - int(rng.integers(0, MAX_AGE_S + 1))),
                    demand=request_demand(request),
                    site=item.options[held.option].label,
                )
            )

    requests = with_flows(
        random_requests(cmap, count=queued, seed=seed), share=flows, cmap=cmap, rng=rng
    )
    moving = [r for r in requests if r.moves_data]
    still = [r for r in requests if not r.moves_data]
    started = time.perf_counter()
    options_of = dict(
        zip((r.id for r in still), request_options(engine, still, top_n=top_n), strict=True)
    )
    for request, pairs in zip(
        moving, flow_plan_options(engine, moving, top_n=top_n, keys=keys), strict=True
    ):
        options_of[request.id] = tuple(option for option, _ in pairs)
    options_s = time.perf_counter() - started
    waiting = []
    for r in requests:
        work = QueuedWork(
            id=r.id,
            tenant=tenants[int(rng.integers(len(tenants)))],
            class_name=class_names[int(rng.choice(len(class_names), p=class_p))],
            demand=request_demand(r),
            submitted_at=float(NOW - int(rng.integers(0, MAX_AGE_S + 1))),
        )
        deadline = int(work.submitted_at + CLASSES.get(work.class_name).default_max_wait_s)
        waiting.append(Waiting(work, options_of[r.id], _duration_s(r), deadline, sites=top_n))
    nodes_s = 0.0
    if waits is not None:
        started = time.perf_counter()
        waiting = [
            replace(w, options=waits.options(request, w.options))
            for request, w in zip(requests, waiting, strict=True)
        ]
        nodes_s = time.perf_counter() - started
    capacity = sites_capacity(engine.arrays)
    started = time.perf_counter()
    fair_order(
        [w.work for w in waiting],
        classes=CLASSES,
        usage=usage_by_tenant(running_work),
        capacity=capacity,
        weights=TENANT_WEIGHTS,
    )
    order_s = time.perf_counter() - started

    gc.collect()
    gc.freeze()
    started, started_cpu = time.perf_counter(), time.process_time()
    result = admission_round(
        calendar,
        waiting,
        classes=CLASSES,
        capacity=capacity,
        running=running_work,
        weights=TENANT_WEIGHTS,
        free_now=free_now_on(calendar, keys),
        nodes=waits,
    )
    cycle_s = time.perf_counter() - started
    cycle_cpu_s = time.process_time() - started_cpu
    gc.unfreeze()
    return _figures(
        spec=spec,
        engine=engine,
        calendar=calendar,
        running=(running, len(running_work)),
        top_n=top_n,
        moving=len(moving),
        options=sum(len(o) for o in options_of.values()),
        nodes=nodes,
        timings=(options_s, nodes_s, order_s, cycle_s, cycle_cpu_s),
        result=result,
    )


def with_flows(
    requests: list[PlacementRequest], *, share: float, cmap: ComputeNetworkMap, rng: Generator
) -> list[PlacementRequest]:
    """`requests`, a `share` of them (drawn) moving data: a dataset of 10 to 2,000 GB at a
    site drawn from the map, staged at up to 10 Gbps, and 1 to 100 GB of results delivered
    to their own province at up to 10 Gbps."""
    if share <= 0:
        return requests
    sites = [site.id for site in cmap.sites]
    out = []
    for request in requests:
        if rng.random() >= share:
            out.append(request)
            continue
        flows = Flows(
            staging=(
                Staging(
                    source=Endpoint(site=sites[int(rng.integers(len(sites)))]),
                    volume_gb=float(rng.uniform(10, 2000)),
                    max_rate_gbps=10.0,
                ),
            ),
            delivery=(
                Delivery(
                    destination=Endpoint(province=request.source_province),
                    volume_gb=float(rng.uniform(1, 100)),
                    max_rate_gbps=10.0,
                ),
            ),
        )
        out.append(request.model_copy(update={"start": "queue", "flows": flows}))
    return out


def _figures(
    *,
    spec: str,
    engine: PlacementEngine,
    calendar: Calendar[int],
    running: tuple[int, int],
    top_n: int,
    moving: int,
    options: int,
    nodes: bool,
    timings: tuple[float, float, float, float, float],
    result: Round,
) -> AdmissionFigures:
    planned = [*result.admit, *result.later]
    delays = [r.start - NOW for r in planned]
    causes: dict[str, int] = {}
    for r in (*result.expired, *result.impossible, *result.stuck):
        causes[r.cause] = causes.get(r.cause, 0) + 1
    return AdmissionFigures(
        map=spec,
        sites=len(engine.map.sites),
        links=len(engine.map.links),
        calendar_resources=len(calendar),
        running_asked=running[0],
        running_held=running[1],
        queued=len(result.order),
        top_n=top_n,
        moving=moving,
        options=options,
        options_s=timings[0],
        nodes=nodes,
        nodes_s=timings[1],
        order_s=timings[2],
        cycle_s=timings[3],
        cycle_cpu_s=timings[4],
        planned_now=len(result.admit),
        planned_later=len(result.later),
        no_start=len(result.order) - len(planned),
        no_start_by_cause=dict(sorted(causes.items())),
        preemptions=len(result.preemptions),
        victims=sum(len(p.victims) for p in result.preemptions),
        mean_delay_s=float(np.mean(delays)) if delays else 0.0,
        max_delay_s=float(max(delays, default=0)),
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


def format_figures(f: AdmissionFigures) -> str:
    """The figures as plain-text lines."""
    causes = ", ".join(f"{cause} {count:,}" for cause, count in f.no_start_by_cause.items())
    return "\n".join(
        [
            f"map {f.map}: {f.sites:,} sites, {f.links:,} links; "
            f"calendar of {f.calendar_resources:,} resources",
            f"running work: {f.running_held:,} of {f.running_asked:,} generated requests "
            "held from now",
            f"queue: {f.queued:,} requests ({f.moving:,} with flows), up to {f.top_n} candidate "
            f"sites each, chosen from {WIDEN * f.top_n} for those with flows "
            f"({f.options:,} options)",
            f"options (the engine's ranking and routes, built once): {f.options_s:.2f} s; "
            f"fair order: {f.order_s:.3f} s"
            + (f"; when the nodes hold the gangs: {f.nodes_s:.3f} s" if f.nodes else ""),
            f"admission cycle: {f.cycle_s:.3f} s for {f.queued:,} requests "
            f"({f.cycle_cpu_s:.3f} s of CPU)"
            + (", gangs booked on the sites' nodes" if f.nodes else ""),
            f"  planned now {f.planned_now:,}, later {f.planned_later:,}, "
            f"no start {f.no_start:,}" + (f" ({causes})" if causes else ""),
            f"  preemptions {f.preemptions:,} ({f.victims:,} victims)",
            f"  planned delay: mean {f.mean_delay_s:,.0f} s, max {f.max_delay_s:,.0f} s",
            f"peak resident memory: {f.peak_rss_mib:,.0f} MiB",
        ]
    )
