"""`cnbrain simulate`: replay a trace on a map with several policies at several offered loads,
with one or more admission orders, and write the comparison report (see
`cnbrain.simulate.report`).

Prints one progress line per (admission, policy, load) run with its wall time, then where the report
is. Returns 0; on a bad argument, map or trace prints `cnbrain: <problem>` and returns 2.
"""

import argparse
import shlex
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from cnbrain.cli.progress import load_map_shown, progress, while_loading
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.errors import MapError
from cnbrain.placement.errors import RequestError
from cnbrain.placement.registry import STRATEGIES
from cnbrain.simulate.flow_simulation import DEFAULT_TOP_N, FLOW_POLICIES
from cnbrain.simulate.metrics import SimulationSummary
from cnbrain.simulate.scenarios import SCENARIOS
from cnbrain.simulate.simulation import DEFAULT_ROUND_GAP_S
from cnbrain.simulate.trace import TraceJob

SYNTHETIC_TRACE = "synthetic:"
DEFAULT_POLICIES = "topn-cpsat,greedy,first-fit,least-allocated,most-allocated,random-feasible"
LOAD_BASES = ("trace", "capacity")
DEFAULT_ADMISSION = "retry"
DEFAULT_LOADS = "0.5,0.9,1.2"
DEFAULT_SCENARIO_LOADS = "0.9,1.2"
MAX_WORKERS = 256
"""The most processes a sweep of the flow simulation runs on."""
MAX_TOP_N = 1000
"""The most candidate sites per job the flow simulation takes."""


def add_simulate_command(
    sub: "argparse._SubParsersAction[argparse.ArgumentParser]", map_help: str
) -> None:
    """Register `simulate` under `sub`."""
    sim = sub.add_parser(
        "simulate", help="replay a trace with several policies and loads; write a report"
    )
    sim.add_argument("--map", default="china", help=map_help)
    source = sim.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--trace", help="a trace file (.jsonl or .csv) or synthetic:jobs=N,hours=H,seed=S"
    )
    source.add_argument(
        "--scenario",
        help="run the flow simulation on scenarios of the suite instead of a trace: "
        f"comma-separated names or 'all' ({', '.join(SCENARIOS)}); see "
        "cnbrain.simulate.scenarios",
    )
    sim.add_argument(
        "--flows",
        action="store_true",
        help="plan the --trace file's jobs with the flow simulation (their flows, each over "
        "its window) instead of replaying them with a constant bandwidth",
    )
    sim.add_argument(
        "--policies",
        default=None,
        help=f"comma-separated (default {DEFAULT_POLICIES}; with --scenario or --flows "
        f"{','.join(FLOW_POLICIES)})",
    )
    sim.add_argument(
        "--load",
        default=None,
        help=f"offered loads, comma-separated (default {DEFAULT_LOADS}; with --scenario or "
        f"--flows {DEFAULT_SCENARIO_LOADS})",
    )
    sim.add_argument(
        "--workers",
        type=int,
        default=None,
        help=f"with --scenario or --flows: runs in parallel, 1 to {MAX_WORKERS} (default: one "
        "per core)",
    )
    sim.add_argument(
        "--quality",
        action="store_true",
        help="with --scenario or --flows: also check each decision of the scarcity policy "
        "against the "
        "exact search over every eligible site",
    )
    sim.add_argument(
        "--top-n",
        type=int,
        default=DEFAULT_TOP_N,
        help=f"with --scenario or --flows: candidate sites per job, 1 to {MAX_TOP_N} (default "
        f"{DEFAULT_TOP_N})",
    )
    sim.add_argument(
        "--whole-life",
        action="store_true",
        help="with --scenario or --flows: also run the first baseline with the model without "
        "windows "
        "(every transfer held at its full rate for the job's whole run), for comparison",
    )
    sim.add_argument(
        "--admission",
        default=DEFAULT_ADMISSION,
        help="order of the retry rounds, comma-separated: retry (arrival order), fair "
        "(fair_order between tenants) or backfill (the scheduling core's admission round); "
        "see cnbrain.simulate.admission",
    )
    sim.add_argument(
        "--classes",
        default=None,
        help="priority classes: shares per class, e.g. high:0.2,normal:0.5,low:0.3, or "
        "'default' for those; each job's class is drawn with --seed, its queue limit is its "
        "class's max wait (high 1 h, normal and low 24 h), and backfill preempts for higher "
        "classes (see cnbrain.simulate.classes); off when not given",
    )
    sim.add_argument(
        "--load-basis",
        choices=LOAD_BASES,
        default="trace",
        help="trace: load is a factor on the trace's own arrival rate; capacity: first rescale "
        "the arrivals so that load 1 offers the map's capacity of the trace's scarcest resource",
    )
    sim.add_argument("--out", required=True, type=Path, help="directory for the report")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--queue-limit", type=float, default=1800, help="seconds a job may wait")
    sim.add_argument("--retry-every", type=float, default=60, help="seconds between retries")
    sim.add_argument(
        "--round-gap",
        type=float,
        default=DEFAULT_ROUND_GAP_S,
        help="with backfill admission: seconds at least between two retry rounds woken by "
        "departures (0: a round at every departure)",
    )
    sim.add_argument(
        "--batch-window",
        type=float,
        default=0,
        help="seconds of arrivals placed together (with --scenario or --flows: planned together "
        "at the "
        "window's end, scarcity in order of their dominant share, the others by arrival)",
    )
    sim.set_defaults(run=simulate_command)


def simulate_command(args: argparse.Namespace) -> int:
    if args.scenario is not None or args.flows:
        from cnbrain.cli.flows import flows_command

        if args.flows and args.trace is None:
            print("cnbrain: --flows plans a trace file: give --trace FILE", file=sys.stderr)
            return 2
        return flows_command(args)
    args.policies = args.policies or DEFAULT_POLICIES
    args.load = args.load or DEFAULT_LOADS
    from cnbrain.simulate.classes import parse_shares
    from cnbrain.simulate.offered import capacity_factor, offered_load, scaled
    from cnbrain.simulate.report import compare

    started = time.perf_counter()
    try:
        policies = _names(args.policies)
        loads = parse_loads(args.load)
        admissions = _admissions(args.admission)
        class_shares = None if args.classes is None else parse_shares(args.classes)
        cmap = load_map_shown(args.map)
        jobs = while_loading(f"reading trace {args.trace}", lambda: load_trace(args.trace, cmap))
        moving = next((job.id for job in jobs if job.flows is not None), None)
        if moving is not None:
            raise ValueError(
                f"trace {args.trace}: job {moving!r} states flows, which the replay with a "
                "constant bandwidth would ignore; plan it with --flows"
            )
        context = {
            "command": command_line(args),
            "map": args.map,
            "trace": args.trace,
            "load_basis": args.load_basis,
            "classes": args.classes or "off",
        }
        if any(job.arrival_s > 0 for job in jobs):
            offered = offered_load(cmap, jobs)
            context["trace_offered_load_at_1"] = f"{offered.value:.4g} ({offered.bottleneck})"
        if args.load_basis == "capacity":
            factor, at_one = capacity_factor(cmap, jobs)
            jobs = scaled(jobs, factor)
            context["arrival_time_factor"] = f"{factor:.6g}"
            context["arrival_window_at_load_1_s"] = f"{at_one.window_s:,.0f}"
    except (ValueError, OSError, MapError, RequestError) as exc:
        print(f"cnbrain: {exc}", file=sys.stderr)
        return 2
    print(
        f"simulating {len(jobs):,} jobs on {cmap.name} ({len(cmap.sites)} sites): "
        f"{len(policies)} policies x {len(loads)} loads x {len(admissions)} admissions, "
        f"load basis {args.load_basis}",
        flush=True,
    )

    def ran(summary: SimulationSummary) -> None:
        advance(1)
        print(
            f"  {summary.policy:<16} load {summary.load:<5g} {summary.admission:<5}"
            f" accepted {summary.accepted_share:7.2%}"
            f"  wait p95 {summary.queue_delay_p95_s:8,.0f} s"
            f"  preempted {summary.preemptions:5,}"
            f"  cost/job {summary.cost_per_accepted_cny:10,.1f} CNY"
            f"  {summary.wall_s:6.1f} s  (total {time.perf_counter() - started:6.1f} s)",
            flush=True,
        )

    runs = len(policies) * len(loads) * len(admissions)
    try:
        with progress("simulating", runs) as advance:
            compare(
                cmap,
                jobs,
                policies=policies,
                loads=loads,
                seed=args.seed,
                out_dir=args.out,
                queue_limit_s=args.queue_limit,
                retry_every_s=args.retry_every,
                round_gap_s=args.round_gap,
                batch_window_s=args.batch_window,
                context=context,
                on_run=ran,
                admissions=admissions,
                class_shares=class_shares,
            )
    except (ValueError, OSError, RequestError) as exc:
        print(f"cnbrain: {exc}", file=sys.stderr)
        return 2
    print(
        f"wrote {args.out / 'report.md'}, summary.json and the plots "
        f"in {time.perf_counter() - started:.1f} s"
    )
    return 0


def command_line(args: argparse.Namespace) -> str:
    """The `cnbrain simulate` command that repeats this run."""
    return shlex.join(
        [
            "cnbrain",
            "simulate",
            *("--map", args.map, "--trace", args.trace),
            *("--policies", args.policies, "--load", args.load),
            *("--admission", args.admission),
            *(() if args.classes is None else ("--classes", args.classes)),
            *("--load-basis", args.load_basis, "--out", str(args.out)),
            *("--seed", str(args.seed), "--queue-limit", f"{args.queue_limit:g}"),
            *("--retry-every", f"{args.retry_every:g}", "--round-gap", f"{args.round_gap:g}"),
            *("--batch-window", f"{args.batch_window:g}"),
        ]
    )


def load_trace(spec: str, cmap: ComputeNetworkMap) -> list[TraceJob]:
    """The jobs of a trace file, or of `synthetic:jobs=N,hours=H,seed=S` on `cmap`."""
    if spec.startswith(SYNTHETIC_TRACE):
        from cnbrain.simulate.generator import synthetic_trace

        params = _synthetic_params(spec)
        return synthetic_trace(
            cmap=cmap,
            jobs=int(params["jobs"]),
            hours=params["hours"],
            seed=int(params.get("seed", 0)),
        )
    from cnbrain.simulate.trace_files import read_trace

    return read_trace(Path(spec))


def _synthetic_params(spec: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in spec.removeprefix(SYNTHETIC_TRACE).split(","):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ("jobs", "hours", "seed"):
            raise ValueError(f"trace {spec!r}: expected synthetic:jobs=N,hours=H,seed=S")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise ValueError(f"trace {spec!r}: {key.strip()} must be a number") from None
    if "jobs" not in out or "hours" not in out:
        raise ValueError(f"trace {spec!r}: jobs and hours are required")
    if out["jobs"] != int(out["jobs"]) or out.get("seed", 0) != int(out.get("seed", 0)):
        raise ValueError(f"trace {spec!r}: jobs and seed must be integers")
    return out


def known_names(text: str, known: Iterable[str], *, what: str) -> list[str]:
    """The comma-separated names of `text`, each once, in order; ValueError naming `what`
    when one is not `known` or there is none."""
    choices = list(known)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in choices]
    if unknown or not names:
        raise ValueError(
            f"unknown {what} {', '.join(unknown) or '(none)'}; known: {', '.join(choices)}"
        )
    return list(dict.fromkeys(names))


def _names(text: str) -> list[str]:
    return known_names(text, STRATEGIES, what="policy")


def _admissions(text: str) -> list[str]:
    from cnbrain.simulate.admission import ADMISSIONS

    return known_names(text, ADMISSIONS, what="admission")


def parse_loads(text: str) -> list[float]:
    """Comma-separated offered loads, each positive and finite; ValueError otherwise."""
    try:
        loads = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--load {text!r}: expected numbers separated by commas") from None
    if not loads or any(not (x > 0) or x == float("inf") for x in loads):
        raise ValueError(f"--load {text!r}: every load must be a positive number")
    return list(dict.fromkeys(loads))
