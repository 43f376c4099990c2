"""`cnbrain simulate --scenario NAME` and `cnbrain simulate --flows --trace FILE`: run the flow
simulation on scenarios of the suite, or on a trace file whose jobs may state flows, and
write the report (`cnbrain.simulate.scenario_report`).

Prints one line per run as it ends, then the verdicts and where the report is. Returns 0; on
a bad argument prints `cnbrain: <problem>` and returns 2.
"""

import argparse
import math
import shlex
import sys
import time

from cnbrain.cli.progress import load_map_shown, progress
from cnbrain.cli.simulate import (
    DEFAULT_SCENARIO_LOADS,
    MAX_TOP_N,
    MAX_WORKERS,
    known_names,
    parse_loads,
)
from cnbrain.domain.bounds import MAX_WINDOW_S
from cnbrain.domain.request import MAX_WAIT_S
from cnbrain.netmap.errors import MapError
from cnbrain.placement.errors import RequestError
from cnbrain.simulate.flow_simulation import DEFAULT_TOP_N, FLOW_POLICIES, check_jobs
from cnbrain.simulate.scenario_report import (
    OURS,
    RunFigures,
    RunSpec,
    TraceWorkload,
    sweep,
    trace_jobs,
    verdicts,
    write_report,
)
from cnbrain.simulate.scenarios import SCENARIOS


def flows_command(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    try:
        trace = None if args.trace is None else _trace(args)
        names = [args.trace] if trace is not None else _scenarios(args.scenario)
        policies = _policies(args.policies or ",".join(FLOW_POLICIES))
        loads = parse_loads(args.load or DEFAULT_SCENARIO_LOADS)
        if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
            raise ValueError(f"--workers must be 1 to {MAX_WORKERS}")
        if not 1 <= args.top_n <= MAX_TOP_N:
            raise ValueError(f"--top-n must be 1 to {MAX_TOP_N}")
        if not (math.isfinite(args.batch_window) and 0 <= args.batch_window <= MAX_WINDOW_S):
            raise ValueError(f"--batch-window must be 0 to {MAX_WINDOW_S:g} seconds")
    except (ValueError, OSError, MapError, RequestError) as exc:
        print(f"cnbrain: {exc}", file=sys.stderr)
        return 2
    window = args.batch_window
    specs = [
        RunSpec(
            name,
            policy,
            load,
            args.seed,
            quality=args.quality and policy == OURS,
            batch_window_s=window,
            top_n=args.top_n,
            trace=trace,
        )
        for name in names
        for load in loads
        for policy in policies
    ]
    reference = next((p for p in policies if p != OURS), None)
    if args.whole_life and reference is not None:
        specs += [
            RunSpec(
                name,
                reference,
                load,
                args.seed,
                whole_life=True,
                batch_window_s=window,
                top_n=args.top_n,
                trace=trace,
            )
            for name in names
            for load in loads
        ]
    print(
        f"simulating {len(names)} scenarios x {len(policies)} policies x {len(loads)} loads "
        f"({len(specs)} runs)",
        flush=True,
    )

    def ran(f: RunFigures) -> None:
        advance(1)
        print(
            f"  {f.spec.scenario:<24} {f.spec.label:<21} load {f.spec.load:<5g}"
            f" accepted {f.accepted:6,}/{f.jobs:<6,} accelerator-hours {f.accelerator_hours:12,.0f}"
            f"  cost {f.cost_cny:14,.0f}  {f.wall_s:6.1f} s",
            flush=True,
        )

    with progress("simulating", len(specs)) as advance:
        figures = sweep(specs, workers=args.workers, on_run=ran)
    if trace is None:
        source = ["--scenario", ",".join(names)]
    else:
        source = ["--flows", "--trace", trace.path, "--map", trace.map_spec]
        source += ["--load-basis", trace.load_basis, "--queue-limit", f"{trace.max_wait_s:g}"]
    command = shlex.join(
        [
            "cnbrain",
            "simulate",
            *source,
            *("--policies", ",".join(policies)),
            *("--load", ",".join(f"{x:g}" for x in loads), "--seed", str(args.seed)),
            *(("--quality",) if args.quality else ()),
            *(("--whole-life",) if args.whole_life else ()),
            *(("--batch-window", f"{window:g}") if window else ()),
            *(("--top-n", str(args.top_n)) if args.top_n != DEFAULT_TOP_N else ()),
            *("--out", str(args.out)),
        ]
    )
    path = write_report(figures, args.out, command=command, seed=args.seed)
    for v in verdicts(figures):
        print(
            f"{v.scenario} load {v.load:g}: {OURS} {'wins' if v.wins else 'does not win'} "
            f"against {v.baseline}: accelerator-hours {v.accelerator_hours_gain:+.1%}, cost "
            f"{v.cost_change:+.1%}, energy {v.energy_change:+.1%}"
        )
    print(f"wrote {path} in {time.perf_counter() - started:.1f} s")
    return 0


def _trace(args: argparse.Namespace) -> TraceWorkload:
    """The trace of `--flows --trace`, checked here so that a bad job is refused before any
    run starts."""
    if not (math.isfinite(args.queue_limit) and 0 <= args.queue_limit <= MAX_WAIT_S):
        raise ValueError(f"--queue-limit must be 0 to {MAX_WAIT_S:g} seconds")
    trace = TraceWorkload(args.trace, args.map, args.load_basis, args.queue_limit)
    cmap = load_map_shown(args.map)
    check_jobs(cmap, trace_jobs(trace, cmap))
    return trace


def _scenarios(text: str) -> list[str]:
    return known_names(
        ",".join(SCENARIOS) if text.strip() == "all" else text, SCENARIOS, what="scenario"
    )


def _policies(text: str) -> list[str]:
    return known_names(text, FLOW_POLICIES, what="flow policy")
