"""`cnbrain fragmentation`: the fragmentation experiment (`cnbrain.simulate.packing`) of
several task lists, loads and policies on one node list, in parallel, with its report."""

import argparse
import json
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from cnbrain.cli.simulate import known_names, parse_loads
from cnbrain.placement.fragmentation import BASELINES, POLICIES, NodeState, Policy, Task
from cnbrain.simulate.packing import PackingInputError, PackingRun, read_nodes, read_tasks, run

MAX_LOAD = 4.0
"""The highest load a run may draw tasks to."""

WIN_FEWER = 0.30
"""How many fewer stranded devices than the best baseline a win takes."""


def add_fragmentation_command(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register `fragmentation` under `sub`."""
    frag = sub.add_parser(
        "fragmentation",
        help="pack task lists onto a cluster's nodes with every policy; count the stranded "
        "accelerators",
    )
    frag.add_argument("--nodes", required=True, type=Path, help="a node list (CSV)")
    frag.add_argument(
        "--tasks", required=True, help="task lists (CSV), comma-separated; each is a trace"
    )
    frag.add_argument("--load", default="0.9,1.2", help="comma-separated loads (at most 4)")
    frag.add_argument(
        "--policies", default=",".join(POLICIES), help=f"comma-separated: {', '.join(POLICIES)}"
    )
    frag.add_argument("--seed", type=int, default=0)
    frag.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    frag.add_argument("--out", required=True, type=Path, help="directory for the report")
    frag.set_defaults(run=fragmentation_command)


def fragmentation_command(args: argparse.Namespace) -> int:
    try:
        loads = parse_loads(args.load)
        if any(load > MAX_LOAD for load in loads):
            raise ValueError(f"--load {args.load!r}: every load must be at most {MAX_LOAD}")
        policies: list[Policy] = [
            p for p in POLICIES if p in known_names(args.policies, POLICIES, what="policy")
        ]
        if not 1 <= args.workers <= 64:
            raise ValueError("--workers must be within 1..64")
        nodes = read_nodes(args.nodes)
        paths = [Path(p.strip()) for p in args.tasks.split(",") if p.strip()]
        if not paths:
            raise ValueError("--tasks: name at least one task list")
        if len({p.stem for p in paths}) != len(paths):
            raise ValueError("--tasks: every list needs a file name of its own (its trace)")
        lists = {p.stem: read_tasks(p) for p in paths}
    except (ValueError, PackingInputError) as error:
        print(f"cnbrain fragmentation: {error}")
        return 2
    jobs = [
        (nodes, tasks, name, load, policy, args.seed)
        for name, tasks in lists.items()
        for load in loads
        for policy in policies
    ]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        runs = list(pool.map(_run, jobs))
    args.out.mkdir(parents=True, exist_ok=True)
    report = render(runs)
    (args.out / "report.md").write_text(report, encoding="utf-8")
    (args.out / "runs.json").write_text(
        json.dumps([r.as_dict() for r in runs], indent=1), encoding="utf-8"
    )
    print(report)
    return 0


def _run(job: tuple[list[NodeState], list[Task], str, float, Policy, int]) -> PackingRun:
    nodes, tasks, name, load, policy, seed = job
    return run(nodes, tasks, trace=name, load=load, policy=policy, seed=seed)


def render(runs: Sequence[PackingRun]) -> str:
    """The report: per trace, a table of its runs and, per load, `fgd` against the baseline
    that stranded the fewest devices."""
    lines = ["# Stranded accelerators", ""]
    for trace in dict.fromkeys(r.trace for r in runs):
        lines += [
            f"## {trace}",
            "",
            "| policy | load | tasks arrived | placed | devices asked | placed | unallocated |"
            " stranded | on devices partly used | fragmentation |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        mine = [r for r in runs if r.trace == trace]
        for r in mine:
            lines.append(
                f"| {r.policy} | {r.load:g} | {r.arrived:,} | {r.placed_share:.1%} |"
                f" {r.asked_devices:,.1f} | {r.placed_devices:,.1f} |"
                f" {r.unallocated_devices:,.1f} | {r.stranded_devices:,.1f} |"
                f" {r.partly_used_devices:,.1f} | {r.fragmentation_devices:,.1f} |"
            )
        lines.append("")
        for load in dict.fromkeys(r.load for r in mine):
            verdict = _verdict([r for r in mine if r.load == load])
            if verdict:
                lines.append(f"- load {load:g}: {verdict}")
        lines.append("")
    return "\n".join(lines)


def _verdict(runs: Sequence[PackingRun]) -> str | None:
    """`fgd` against the baseline that stranded the fewest devices: it wins with
    `WIN_FEWER` fewer stranded devices and at least as large a share of tasks placed."""
    ours = next((r for r in runs if r.policy == "fgd"), None)
    baselines = [r for r in runs if r.policy in BASELINES]
    if ours is None or not baselines:
        return None
    best = min(baselines, key=lambda r: (r.stranded_devices, -r.placed_share))
    if best.stranded_devices == 0:
        fewer = "none stranded by either" if ours.stranded_devices == 0 else "more stranded"
    elif ours.stranded_devices > best.stranded_devices:
        fewer = f"{ours.stranded_devices / best.stranded_devices - 1:.1%} more stranded"
    else:
        fewer = f"{1 - ours.stranded_devices / best.stranded_devices:.1%} fewer stranded"
    wins = (
        ours.stranded_devices <= (1 - WIN_FEWER) * best.stranded_devices
        and ours.placed_share >= best.placed_share
        and best.stranded_devices > 0
    )
    return (
        f"fgd {ours.stranded_devices:,.1f} stranded, {ours.placed_share:.1%} placed; best"
        f" baseline {best.policy} {best.stranded_devices:,.1f}, {best.placed_share:.1%}:"
        f" {fewer}, {'wins' if wins else 'does not win'}"
        f" (at least {WIN_FEWER:.0%} fewer with as large a share placed)"
    )
