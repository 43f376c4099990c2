"""`cnbrain trace`: make simulator traces from the Alibaba pod lists or the synthetic generator.

Each command writes the trace in the format `--out`'s suffix names (.jsonl or .csv), prints one
summary line and returns 0; on a bad input it prints `cnbrain: <problem>` and returns 2.
"""

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from cnbrain.domain.enums import WorkloadClass
from cnbrain.netmap.load import load_map
from cnbrain.simulate.trace import TraceJob
from cnbrain.simulate.trace_files import write_trace


def add_trace_commands(
    sub: "argparse._SubParsersAction[argparse.ArgumentParser]", map_help: str
) -> None:
    """Register `trace convert-alibaba` and `trace synthetic` under `sub`."""
    trace = sub.add_parser("trace", help="make simulator traces").add_subparsers(
        required=True, metavar="SOURCE"
    )
    alibaba = trace.add_parser(
        "convert-alibaba", help="convert an Alibaba cluster-trace-gpu-v2023 pod list"
    )
    alibaba.add_argument("--pods", required=True, type=Path, help="openb_pod_list_*.csv")
    alibaba.add_argument("--map", default="china", help=map_help)
    alibaba.add_argument("--seed", type=int, default=0)
    alibaba.add_argument("--tenants", type=int, default=8)
    alibaba.add_argument("--out", required=True, type=Path, help="FILE.jsonl or FILE.csv")
    alibaba.set_defaults(run=convert_alibaba)

    synthetic = trace.add_parser("synthetic", help="generate a seeded synthetic trace")
    synthetic.add_argument("--map", default="china", help=map_help)
    synthetic.add_argument("--jobs", type=int, required=True)
    synthetic.add_argument("--hours", type=float, required=True)
    synthetic.add_argument("--seed", type=int, default=0)
    synthetic.add_argument("--out", required=True, type=Path, help="FILE.jsonl or FILE.csv")
    synthetic.set_defaults(run=synthetic_trace)


def convert_alibaba(args: argparse.Namespace) -> int:
    from cnbrain.simulate.alibaba import convert_alibaba_pods

    try:
        cmap = load_map(args.map)
        jobs, report = convert_alibaba_pods(
            args.pods, cmap=cmap, seed=args.seed, tenants=args.tenants
        )
        written = write_trace(jobs, args.out)
    except (ValueError, OSError) as exc:
        print(f"cnbrain: {exc}", file=sys.stderr)
        return 2
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(report.skipped.items()))
    skipped = f"skipped {report.skipped_total}" + (f" ({reasons})" if reasons else "")
    print(f"{describe(jobs, written, args.out)}; {report.pods} pods, {skipped}")
    return 0


def synthetic_trace(args: argparse.Namespace) -> int:
    from cnbrain.simulate.generator import synthetic_trace as generate

    try:
        cmap = load_map(args.map)
        jobs = generate(cmap=cmap, jobs=args.jobs, hours=args.hours, seed=args.seed)
        written = write_trace(jobs, args.out)
    except (ValueError, OSError) as exc:
        print(f"cnbrain: {exc}", file=sys.stderr)
        return 2
    print(f"{describe(jobs, written, args.out)}; skipped 0")
    return 0


def describe(jobs: Sequence[TraceJob], written: int, out: Path) -> str:
    """'wrote N jobs to OUT (span ..., per-class counts)'."""
    classes = Counter(job.workload_class for job in jobs)
    mix = ", ".join(f"{c.value} {classes[c]}" for c in WorkloadClass if classes[c])
    span_h = (max(j.arrival_s for j in jobs) - min(j.arrival_s for j in jobs)) / 3600 if jobs else 0
    return f"wrote {written} jobs to {out} (arrivals over {span_h:,.1f} h; {mix or 'empty'})"
