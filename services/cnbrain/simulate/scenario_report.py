"""Run the scenario suite (scenarios x policies x loads) in parallel and write its report.

Each run is one `simulate_flows` call in a worker process; a worker draws its scenario's
trace from the seed itself (or reads its trace file), so runs share nothing. A scenario's
loads are on the capacity basis (`cnbrain.simulate.offered.capacity_factor`): at load 1 the
trace asks, over its arrival window, for the map's whole capacity of its scarcest resource;
a trace file's are on the basis it names (`TraceWorkload`). The report names, per
scenario and load, our policy (`scarcity`) against the best baseline (the one that served
the most accelerator-hours), and for every policy what stopped the jobs it rejected: the
kind of resource and the resources themselves. A run marked `whole_life` plans with the model
without windows, so the report shows what the model itself changes; it is no baseline.
"""

import multiprocessing
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.netmap.load import load_map
from cnbrain.simulate.flow_simulation import DEFAULT_TOP_N, FlowRun, simulate_flows
from cnbrain.simulate.offered import capacity_factor, scaled
from cnbrain.simulate.scenarios import SCENARIOS
from cnbrain.simulate.trace import TraceJob
from cnbrain.simulate.trace_files import read_trace

OURS: Final = "scarcity"
ACC_HOURS_WIN: Final = 0.10
"""Ours wins when it serves at least 10% more accelerator-hours than the best baseline..."""
COST_OR_ENERGY_WIN: Final = 0.15
"""...or as many at least 15% cheaper, or with 15% less energy."""
QUALITY_GAP: Final = 0.01


@dataclass(frozen=True, slots=True)
class TraceWorkload:
    """A trace file (`path`) planned on the map `map_spec`, every job waiting at most
    `max_wait_s`; `load_basis` `trace` keeps its arrival rate at load 1, `capacity` scales
    it as a scenario's is."""

    path: str
    map_spec: str
    load_basis: str = "trace"
    max_wait_s: float = 1800.0


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run of `scenario` (a name of the suite, or the label of `trace`, which it then
    runs instead): `whole_life` plans with the model without windows (every transfer at its
    full rate for the job's whole run), the reference the report compares the model with."""

    scenario: str
    policy: str
    load: float
    seed: int
    quality: bool = False
    whole_life: bool = False
    batch_window_s: float = 0.0
    top_n: int = DEFAULT_TOP_N
    trace: TraceWorkload | None = None

    @property
    def label(self) -> str:
        return f"{self.policy}, whole life" if self.whole_life else self.policy


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What the report needs of one run (a `FlowRun` is too large to send back whole)."""

    spec: RunSpec
    jobs: int
    asked_accelerator_hours: float
    accepted: int
    accelerator_hours: float
    cost_cny: float
    energy_kwh: float
    mean_wait_s: float
    blockers: dict[str, int]
    where: list[tuple[str, int]]
    wall_s: float
    quality_gaps: list[float] = field(default_factory=list)


def scenario_jobs(name: str, seed: int, cmap: ComputeNetworkMap | None = None) -> list[TraceJob]:
    """The scenario's trace for `seed` on its map (`cmap`, when given, is that map), with its
    arrivals scaled so that load 1 asks for the map's capacity of its scarcest resource."""
    scenario = SCENARIOS[name]
    cmap = cmap or load_map(scenario.map_spec)
    jobs = scenario.draw(cmap, scenario.jobs, scenario.hours, seed)
    factor, _ = capacity_factor(cmap, jobs)
    return scaled(jobs, factor)


def trace_jobs(trace: TraceWorkload, cmap: ComputeNetworkMap) -> list[TraceJob]:
    """The jobs of `trace`'s file, scaled to its load basis."""
    jobs = read_trace(Path(trace.path))
    if trace.load_basis == "capacity":
        factor, _ = capacity_factor(cmap, jobs)
        jobs = scaled(jobs, factor)
    return jobs


def run_one(spec: RunSpec) -> RunFigures:
    """One run of the sweep (in a worker process)."""
    if spec.trace is not None:
        cmap = load_map(spec.trace.map_spec)
        jobs = trace_jobs(spec.trace, cmap)
        waits = None
        max_wait_s = spec.trace.max_wait_s
    else:
        scenario = SCENARIOS[spec.scenario]
        cmap = load_map(scenario.map_spec)
        jobs = scenario_jobs(spec.scenario, spec.seed, cmap)
        waits = scenario.max_wait_s
        max_wait_s = 1800.0
    run = simulate_flows(
        cmap,
        jobs,
        policy=spec.policy,
        load=spec.load,
        seed=spec.seed,
        max_wait_s=max_wait_s,
        waits=waits,
        quality=spec.quality,
        whole_life=spec.whole_life,
        batch_window_s=spec.batch_window_s,
        top_n=spec.top_n,
    )
    return _figures(spec, jobs, run)


def _figures(spec: RunSpec, jobs: Sequence[TraceJob], run: FlowRun) -> RunFigures:
    accepted = [o for o in run.outcomes if o.accepted]
    return RunFigures(
        spec=spec,
        jobs=len(jobs),
        asked_accelerator_hours=sum(
            j.accelerators * j.duration_s / 3600 for j in jobs if j.accelerator_model
        ),
        accepted=len(accepted),
        accelerator_hours=run.accelerator_hours,
        cost_cny=run.cost_cny,
        energy_kwh=run.energy_kwh,
        mean_wait_s=sum(o.wait_s for o in accepted) / len(accepted) if accepted else 0.0,
        blockers=dict(run.blockers()),
        where=run.where().most_common(3),
        wall_s=run.wall_s,
        quality_gaps=[o.quality_gap for o in run.outcomes if o.quality_gap is not None],
    )


def sweep(
    specs: Sequence[RunSpec],
    *,
    workers: int | None = None,
    on_run: Callable[[RunFigures], None] | None = None,
) -> list[RunFigures]:
    """Every run of `specs`, on `workers` processes (default: one per core), in the order
    given; `on_run` sees each as it comes, in that order (`worker_pool`)."""
    workers = workers or os.cpu_count() or 1
    if workers == 1:
        return _collect(map(run_one, specs), on_run)
    with worker_pool(workers) as pool:
        return _collect(pool.map(run_one, specs), on_run)


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of `workers` processes started by a fork server, never forked from this
    process: a thread of this one (a progress display's refresh, say) could hold a lock at
    the fork that the child would then wait on for ever."""
    context = multiprocessing.get_context("forkserver")
    return ProcessPoolExecutor(max_workers=workers, mp_context=context)


def _collect(
    results: Iterable[RunFigures], on_run: Callable[[RunFigures], None] | None
) -> list[RunFigures]:
    out = []
    for figures in results:
        if on_run:
            on_run(figures)
        out.append(figures)
    return out


@dataclass(frozen=True, slots=True)
class Verdict:
    """Ours against the best baseline at one scenario and load."""

    scenario: str
    load: float
    baseline: str
    accelerator_hours_gain: float
    cost_change: float
    energy_change: float

    @property
    def wins(self) -> bool:
        as_many = self.accelerator_hours_gain >= 0
        cheaper = min(self.cost_change, self.energy_change) <= -COST_OR_ENERGY_WIN
        return self.accelerator_hours_gain >= ACC_HOURS_WIN or (as_many and cheaper)


def verdicts(figures: Sequence[RunFigures]) -> list[Verdict]:
    """Per (scenario, load) where ours ran with at least one baseline, the verdict."""
    by_cell: dict[tuple[str, float], list[RunFigures]] = {}
    for f in figures:
        if not f.spec.whole_life:
            by_cell.setdefault((f.spec.scenario, f.spec.load), []).append(f)
    out = []
    for (scenario, load), runs in by_cell.items():
        ours = next((r for r in runs if r.spec.policy == OURS), None)
        others = [r for r in runs if r.spec.policy != OURS]
        if ours is None or not others:
            continue
        best = max(others, key=lambda r: (r.accelerator_hours, -r.cost_cny))
        out.append(
            Verdict(
                scenario,
                load,
                best.spec.policy,
                _change(ours.accelerator_hours, best.accelerator_hours),
                _change(ours.cost_cny, best.cost_cny),
                _change(ours.energy_kwh, best.energy_kwh),
            )
        )
    return out


def _change(value: float, base: float) -> float:
    return (value - base) / base if base else 0.0


def write_report(figures: Sequence[RunFigures], out_dir: Path, *, command: str, seed: int) -> Path:
    """Write `report.md` into `out_dir` and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Flows over time",
        "",
        f"Command: `{command}`. Seed {seed}. Simulated (`cnbrain.simulate.flow_simulation`).",
        'Rules of each scenario: docs/simulator.md, "Scenarios".',
        "",
    ]
    for name in dict.fromkeys(f.spec.scenario for f in figures):
        runs = [f for f in figures if f.spec.scenario == name]
        trace = runs[0].spec.trace
        if trace is None:
            scenario = SCENARIOS[name]
            about = f"{scenario.summary}; map `{scenario.map_spec}`, loads on the capacity basis"
        else:
            about = (
                f"trace `{trace.path}` on map `{trace.map_spec}`, loads on the "
                f"{trace.load_basis} basis, every job waiting at most {trace.max_wait_s:g} s"
            )
        lines += [
            f"## {name}",
            "",
            f"{about}; {runs[0].jobs:,} jobs, "
            f"{runs[0].asked_accelerator_hours:,.0f} accelerator-hours asked.",
            "",
            "| policy | load | accepted | accelerator-hours | of asked | cost (CNY) | energy "
            "(kWh) | mean wait (s) | rejected by | where | wall (s) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|",
        ]
        order = sorted(
            runs,
            key=lambda f: (f.spec.load, f.spec.whole_life, f.spec.policy != OURS, f.spec.policy),
        )
        for f in order:
            blockers = ", ".join(f"{k} {v}" for k, v in Counter(f.blockers).most_common())
            where = ", ".join(f"{k} ({v})" for k, v in f.where)
            share = (
                f.accelerator_hours / f.asked_accelerator_hours if f.asked_accelerator_hours else 0
            )
            lines.append(
                f"| {f.spec.label} | {f.spec.load:g} | {f.accepted:,} | "
                f"{f.accelerator_hours:,.0f} | {share:.1%} | {f.cost_cny:,.0f} | "
                f"{f.energy_kwh:,.0f} | {f.mean_wait_s:,.0f} | {blockers or '-'} | "
                f"{where or '-'} | {f.wall_s:.1f} |"
            )
        lines.append("")
        for v in verdicts(runs):
            outcome = "wins" if v.wins else "does not win"
            lines.append(
                f"- load {v.load:g}: `{OURS}` {outcome} against `{v.baseline}` (the baseline "
                f"that served the most accelerator-hours): accelerator-hours "
                f"{v.accelerator_hours_gain:+.1%}, cost {v.cost_change:+.1%}, energy "
                f"{v.energy_change:+.1%}."
            )
        for f in runs:
            if f.spec.quality and f.accepted:
                within = sum(g <= QUALITY_GAP for g in f.quality_gaps)
                exact = f.accepted - len(f.quality_gaps)
                lines.append(
                    f"- quality of `{f.spec.policy}` at load {f.spec.load:g} against the exact "
                    f"search over every eligible site: {(within + exact) / f.accepted:.1%} of "
                    f"its {f.accepted:,} decisions within {QUALITY_GAP:.0%} of the exact score "
                    f"({exact:,} had at most the Top-{f.spec.top_n} eligible sites, so the same "
                    f"choice; of "
                    f"the {len(f.quality_gaps):,} others, {within:,} within)."
                )
        lines.append("")
    path = out_dir / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
