"""Compare policies on one map and trace across offered loads, and write the report.

`compare` runs every policy at every load with every admission order (sequentially, each
run on a fresh engine) and writes into `out_dir`: `report.md` (how it was run, the map and
trace, a table policy x load x admission, queueing delay per tenant, where our policy stands
against the baselines under each admission), `summary.json` (the same figures and every run's
time series) and the PNG plots of `cnbrain.simulate.plots` (of the first admission's runs).
"""

import json
import math
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.registry import DEFAULT_STRATEGY
from cnbrain.simulate import plots
from cnbrain.simulate.admission import Admission, checked_admission
from cnbrain.simulate.classes import draw_classes
from cnbrain.simulate.metrics import SimulationSummary, summarise
from cnbrain.simulate.offered import offered_load
from cnbrain.simulate.simulation import DEFAULT_ROUND_GAP_S, simulate
from cnbrain.simulate.trace import TraceJob

OURS = DEFAULT_STRATEGY
TARGET_GAIN = 0.10
"""Our target: at least 10% more accepted jobs than the best baseline ..."""
EQUAL_TOLERANCE = 0.001
""".. or equal acceptance (within 0.1% of the jobs) at lower cost and energy per job."""
MAX_TENANTS_LISTED = 10
"""`report.md` lists queueing delay per tenant up to this many tenants (summary.json always)."""


@dataclass(frozen=True, slots=True)
class Standing:
    """Our policy against one baseline at one load, both with one admission order."""

    load: float
    admission: str
    baseline: str
    best: bool
    """This baseline accepts the most jobs of all baselines at this load (ties: lower cost)."""
    accepted_pp: float
    """Our accepted share minus the baseline's, in percentage points."""
    accepted_rel: float
    """Our accepted jobs / the baseline's, minus 1 (inf when it accepts none and we do)."""
    cost_per_job_rel: float
    energy_per_job_rel: float
    target_met: bool

    def as_dict(self) -> dict[str, object]:
        """Plain data for JSON; a non-finite ratio becomes None."""
        return {
            k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in asdict(self).items()
        }


def compare(
    cmap: ComputeNetworkMap,
    jobs: Sequence[TraceJob],
    *,
    policies: Sequence[str],
    loads: Sequence[float],
    seed: int,
    out_dir: Path,
    queue_limit_s: float = 1800,
    retry_every_s: float = 60,
    round_gap_s: float = DEFAULT_ROUND_GAP_S,
    batch_window_s: float = 0,
    context: Mapping[str, str] | None = None,
    on_run: Callable[[SimulationSummary], None] | None = None,
    admissions: Sequence[str] = (Admission.RETRY,),
    class_shares: Mapping[str, float] | None = None,
) -> list[SimulationSummary]:
    """Run each policy at each load with each admission, write the report files, return the
    summaries (admission major, then policy, loads in the given order). `context` (for
    example the command line, the map and trace specs) is quoted in the report; `on_run` is
    called after every run. With `class_shares` (`cnbrain.simulate.classes`), every job gets
    a class drawn once with `seed`, the same in every run. ValueError for an unknown
    admission or bad shares."""
    if not policies or not loads or not admissions:
        raise ValueError("need at least one policy, one load and one admission")
    admissions = [checked_admission(a).value for a in admissions]
    classes = None if class_shares is None else draw_classes(len(jobs), class_shares, seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    summaries = _run_all(
        cmap,
        jobs,
        policies=policies,
        loads=loads,
        seed=seed,
        queue_limit_s=queue_limit_s,
        retry_every_s=retry_every_s,
        round_gap_s=round_gap_s,
        batch_window_s=batch_window_s,
        on_run=on_run,
        admissions=admissions,
        priority_classes=classes,
    )
    settings = {
        "seed": seed,
        "policies": list(policies),
        "loads": list(loads),
        "admissions": list(admissions),
        "queue_limit_s": queue_limit_s,
        "retry_every_s": retry_every_s,
        "round_gap_s": round_gap_s,
        "batch_window_s": batch_window_s,
        "class_shares": None if class_shares is None else dict(class_shares),
        "wall_s": round(time.perf_counter() - started, 1),
        **(context or {}),
    }
    _write_report_files(out_dir, cmap, jobs, summaries, settings)
    return summaries


def _run_all(
    cmap: ComputeNetworkMap,
    jobs: Sequence[TraceJob],
    *,
    policies: Sequence[str],
    loads: Sequence[float],
    seed: int,
    queue_limit_s: float,
    retry_every_s: float,
    round_gap_s: float,
    batch_window_s: float,
    on_run: Callable[[SimulationSummary], None] | None,
    admissions: Sequence[str],
    priority_classes: Sequence[str] | None,
) -> list[SimulationSummary]:
    """Simulate every policy at every load with every admission, one after another
    (admission major, then policy), each run on a fresh engine; the summaries in that order.
    `on_run` is called after every run."""
    summaries: list[SimulationSummary] = []
    for admission in admissions:
        for policy in policies:
            for load in loads:
                result = simulate(
                    cmap,
                    jobs,
                    policy=policy,
                    load=load,
                    seed=seed,
                    queue_limit_s=queue_limit_s,
                    retry_every_s=retry_every_s,
                    round_gap_s=round_gap_s,
                    batch_window_s=batch_window_s,
                    admission=admission,
                    priority_classes=priority_classes,
                )
                summary = summarise(result)
                summaries.append(summary)
                if on_run is not None:
                    on_run(summary)
    return summaries


def _write_report_files(
    out_dir: Path,
    cmap: ComputeNetworkMap,
    jobs: Sequence[TraceJob],
    summaries: Sequence[SimulationSummary],
    settings: Mapping[str, Any],
) -> None:
    """Write the plots, `summary.json` and `report.md` of `summaries` into `out_dir`."""
    standings = standings_of(summaries)
    figures = _plot_all(summaries, out_dir)
    map_facts, trace_facts = map_summary(cmap), trace_summary(jobs, cmap)
    _write_summary_json(
        out_dir / "summary.json",
        settings=settings,
        map_facts=map_facts,
        trace_facts=trace_facts,
        summaries=summaries,
        standings=standings,
    )
    (out_dir / "report.md").write_text(
        render_report(
            settings=settings,
            map_facts=map_facts,
            trace_facts=trace_facts,
            summaries=summaries,
            standings=standings,
            figures=[f.name for f in figures],
        ),
        encoding="utf-8",
    )


def _plot_all(summaries: Sequence[SimulationSummary], out_dir: Path) -> list[Path]:
    """Draw the report's plots of the first admission's runs into `out_dir`; their files,
    in the report's order."""
    first = summaries[0].admission if summaries else Admission.RETRY
    summaries = [s for s in summaries if s.admission == first]
    return [
        plots.acceptance_vs_load(summaries, out_dir),
        plots.utilisation_over_time(summaries, out_dir),
        plots.cost_vs_latency(summaries, out_dir),
    ]


def _write_summary_json(
    path: Path,
    *,
    settings: Mapping[str, Any],
    map_facts: Mapping[str, Any],
    trace_facts: Mapping[str, Any],
    summaries: Sequence[SimulationSummary],
    standings: Sequence[Standing],
) -> None:
    """Write the report's figures and every run's time series to `path` as JSON."""
    path.write_text(
        json.dumps(
            {
                "settings": settings,
                "map": map_facts,
                "trace": trace_facts,
                "runs": [s.as_dict() for s in summaries],
                "standings": [s.as_dict() for s in standings],
            },
            indent=1,
            ensure_ascii=False,
        )
        + "\n",
        encoding="utf-8",
    )


def standings_of(summaries: Sequence[SimulationSummary]) -> list[Standing]:
    """Our policy against every baseline, at every load and admission where both ran."""
    out: list[Standing] = []
    for admission, load in dict.fromkeys((s.admission, s.load) for s in summaries):
        runs = [s for s in summaries if s.load == load and s.admission == admission]
        ours = next((s for s in runs if s.policy == OURS), None)
        baselines = [s for s in runs if s.policy != OURS]
        if ours is None or not baselines:
            continue
        best = min(baselines, key=lambda s: (-s.accepted, s.cost_per_accepted_cny))
        for base in baselines:
            rel = (
                ours.accepted / base.accepted - 1
                if base.accepted
                else (0.0 if not ours.accepted else float("inf"))
            )
            cost = _rel(ours.cost_per_accepted_cny, base.cost_per_accepted_cny)
            energy = _rel(ours.energy_per_accepted_kwh, base.energy_per_accepted_kwh)
            equal = abs(ours.accepted - base.accepted) <= EQUAL_TOLERANCE * ours.jobs
            out.append(
                Standing(
                    load=load,
                    admission=admission,
                    baseline=base.policy,
                    best=base is best,
                    accepted_pp=100 * (ours.accepted_share - base.accepted_share),
                    accepted_rel=rel,
                    cost_per_job_rel=cost,
                    energy_per_job_rel=energy,
                    target_met=rel >= TARGET_GAIN or (equal and cost < 0 and energy < 0),
                )
            )
    return out


def _rel(ours: float, theirs: float) -> float:
    return ours / theirs - 1 if theirs else 0.0


def map_summary(cmap: ComputeNetworkMap) -> dict[str, Any]:
    accelerators: Counter[str] = Counter()
    for site in cmap.sites:
        accelerators.update(site.capacity.accelerators)
    return {
        "name": cmap.name,
        "provinces": len(cmap.provinces),
        "sites": len(cmap.sites),
        "sites_by_kind": dict(Counter(s.kind.value for s in cmap.sites)),
        "links": len(cmap.links),
        "cpu_cores": sum(s.capacity.cpu_cores for s in cmap.sites),
        "accelerators": {m: accelerators[m] for m in cmap.accelerator_models},
    }


def trace_summary(jobs: Sequence[TraceJob], cmap: ComputeNetworkMap) -> dict[str, Any]:
    """Size and shape of the trace, and the load it offers `cmap` at load 1 per resource
    (`cnbrain.simulate.offered.offered_load`; None when its arrivals span no time)."""
    span = max((j.arrival_s for j in jobs), default=0.0)
    durations = [j.duration_s for j in jobs]
    acc_jobs: Counter[str] = Counter(
        j.accelerator_model for j in jobs if j.accelerator_model and j.accelerator_count
    )
    offered = offered_load(cmap, jobs) if span > 0 else None
    return {
        "jobs": len(jobs),
        "span_h": span / 3600,
        "tenants": len({j.tenant for j in jobs}),
        "classes": dict(Counter(j.workload_class.value for j in jobs)),
        "source_provinces": len({j.source_province for j in jobs}),
        "duration_mean_h": statistics.fmean(durations) / 3600 if durations else 0.0,
        "duration_median_h": statistics.median(durations) / 3600 if durations else 0.0,
        "cpu_only_jobs": len(jobs) - sum(acc_jobs.values()),
        "accelerator_jobs": dict(acc_jobs),
        "latency_bounded_jobs": sum(1 for j in jobs if j.max_latency_ms is not None),
        "offered_load_at_1": dict(offered.per_resource) if offered else None,
        "bottleneck": offered.bottleneck if offered else None,
    }


def render_report(
    *,
    settings: Mapping[str, Any],
    map_facts: Mapping[str, Any],
    trace_facts: Mapping[str, Any],
    summaries: Sequence[SimulationSummary],
    standings: Sequence[Standing],
    figures: Sequence[str],
) -> str:
    """The markdown report."""
    lines = ["# What-if simulation report", "", "## How it was run", ""]
    lines += [f"- {key}: `{value}`" for key, value in settings.items()]
    lines += [
        "",
        "Definitions of every figure: `docs/simulator.md` (sections Simulation and Metrics).",
        "",
        "## Map",
        "",
        f"`{map_facts['name']}`: {map_facts['provinces']} provinces, {map_facts['sites']} sites "
        f"({_listing(map_facts['sites_by_kind'])}), {map_facts['links']} links, "
        f"{map_facts['cpu_cores']:,.0f} CPU cores; accelerators: "
        f"{_listing(map_facts['accelerators'])}.",
        "",
        "## Trace",
        "",
        f"{trace_facts['jobs']:,} jobs over {trace_facts['span_h']:,.1f} h (at load 1) from "
        f"{trace_facts['source_provinces']} provinces, {trace_facts['tenants']} tenants; "
        f"classes: {_listing(trace_facts['classes'])}; duration mean "
        f"{trace_facts['duration_mean_h']:.2f} h, median {trace_facts['duration_median_h']:.2f} h; "
        f"{trace_facts['cpu_only_jobs']:,} CPU-only jobs; jobs with accelerators: "
        f"{_listing(trace_facts['accelerator_jobs'])}; latency-bounded jobs: "
        f"{trace_facts['latency_bounded_jobs']:,}.",
        "",
        _offered_text(trace_facts),
        "",
        "## Results",
        "",
        *_results_table(summaries),
        "",
        _preemption_text(summaries),
        "",
        "## Queueing delay per priority class",
        "",
        *_class_table(summaries),
        "",
        "## Queueing delay per tenant",
        "",
        *_tenant_table(summaries),
        "",
        "## Our policy against the baselines",
        "",
        *_standings_text(standings, summaries),
        "",
        "## Plots",
        "",
    ]
    lines += [f"![{name}]({name})" for name in figures]
    return "\n".join(lines) + "\n"


def _preemption_text(summaries: Sequence[SimulationSummary]) -> str:
    if not any(s.preemption_modelled for s in summaries):
        return (
            "Preemptions: 0 in every run; preemption is not modelled in these runs (it needs "
            "priority classes and backfill admission)."
        )
    return (
        "Preemptions (`preempted`): running jobs preempted for the stuck jobs of higher "
        "classes, in the runs with priority classes and backfill admission; each went back "
        "to the queue and its work was lost (`GPU-h lost`); the other runs cannot preempt."
    )


def _class_table(summaries: Sequence[SimulationSummary]) -> list[str]:
    """Per run and priority class: jobs, accepted share, p50 and p95 of queueing delay."""
    if not any(s.queue_delay_by_class for s in summaries):
        return ["No priority classes in these runs (every job in one class)."]
    rows = [
        "| policy | load | admission | class | jobs | accepted | wait p50 s | wait p95 s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        for name, figures in s.queue_delay_by_class.items():
            rows.append(
                f"| {s.policy} | {s.load:g} | {s.admission} | {name} | {figures['jobs']:,.0f} | "
                f"{figures['accepted_share']:.2%} | {figures['p50_s']:,.0f} | "
                f"{figures['p95_s']:,.0f} |"
            )
    return rows


def _offered_text(trace_facts: Mapping[str, Any]) -> str:
    offered = trace_facts["offered_load_at_1"]
    if not offered:
        return "Offered load: undefined (the arrivals span no time)."
    return (
        "Offered load at load 1 (`cnbrain.simulate.offered`: mean amount held over the "
        "arrival window, durations capped at the window, over the map's total), bottleneck "
        f"{trace_facts['bottleneck']}: "
        + ", ".join(f"{r} {v:.3%}" for r, v in offered.items())
        + "."
    )


def _listing(counts: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in counts.items()) or "none"


RESULT_COLUMNS = (
    "policy",
    "load",
    "admission",
    "accepted",
    "acc. GPUs",
    "never fits",
    "timed out",
    "wait mean s",
    "wait p50 s",
    "wait p95 s",
    "GPU-h",
    "Jain GPU-h",
    "preempted",
    "GPU-h lost",
    "site util",
    "site cv",
    "GPU util",
    "link util mean/max",
    "stranded",
    "cost/job CNY",
    "energy/job kWh",
    "carbon t",
    "latency mean/p95 ms",
    "SLO miss",
    "Jain",
    "wall s",
)


def _results_table(summaries: Sequence[SimulationSummary]) -> list[str]:
    rows = [
        "| " + " | ".join(RESULT_COLUMNS) + " |",
        "|" + "---|" * len(RESULT_COLUMNS),
    ]
    order = list(dict.fromkeys(s.admission for s in summaries))
    for s in sorted(
        summaries, key=lambda s: (s.load, s.policy != OURS, s.policy, order.index(s.admission))
    ):
        cells = (
            s.policy,
            f"{s.load:g}",
            s.admission,
            f"{s.accepted_share:.2%}",
            f"{s.accepted_accelerator_share:.2%}",
            f"{s.rejected_by_reason.get('never_fits', 0):,}",
            f"{s.rejected_by_reason.get('queue_timeout', 0):,}",
            f"{s.queue_delay_mean_s:,.0f}",
            f"{s.queue_delay_p50_s:,.0f}",
            f"{s.queue_delay_p95_s:,.0f}",
            f"{s.accelerator_hours:,.1f}",
            f"{s.fairness_accelerator_hours_jain:.3f}",
            f"{s.preemptions:,}" if s.preemption_modelled else "-",
            f"{s.accelerator_hours_lost:,.1f}",
            f"{s.site_utilisation_mean:.1%}",
            f"{s.site_utilisation_cv:.2f}",
            f"{s.accelerator_utilisation_mean:.1%}",
            f"{s.link_utilisation_mean:.1%} / {s.link_utilisation_max:.1%}",
            f"{s.stranded_accelerators_mean:,.1f}",
            f"{s.cost_per_accepted_cny:,.1f}",
            f"{s.energy_per_accepted_kwh:,.2f}",
            f"{s.carbon_kg / 1000:,.1f}",
            f"{s.path_latency_mean_ms:.2f} / {s.path_latency_p95_ms:.2f}",
            f"{s.slo_misses}",
            f"{s.fairness_jain:.3f}",
            f"{s.wall_s:.1f}",
        )
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _tenant_table(summaries: Sequence[SimulationSummary]) -> list[str]:
    """Per run and tenant: p50 and p95 of queueing delay, accelerator-hours served."""
    if any(s.tenants > MAX_TENANTS_LISTED for s in summaries):
        return [f"More than {MAX_TENANTS_LISTED} tenants: see `summary.json`."]
    rows = [
        "| policy | load | admission | tenant | wait p50 s | wait p95 s | GPU-h |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        for tenant in sorted(set(s.queue_delay_by_tenant) | set(s.accelerator_hours_by_tenant)):
            delay = s.queue_delay_by_tenant.get(tenant)
            p50, p95 = (
                ("-", "-")
                if delay is None
                else (
                    f"{delay['p50_s']:,.0f}",
                    f"{delay['p95_s']:,.0f}",
                )
            )
            hours = s.accelerator_hours_by_tenant.get(tenant, 0.0)
            rows.append(
                f"| {s.policy} | {s.load:g} | {s.admission} | {tenant} | {p50} | {p95} | "
                f"{hours:,.1f} |"
            )
    return rows


def _standings_text(
    standings: Sequence[Standing], summaries: Sequence[SimulationSummary]
) -> list[str]:
    if not standings:
        return [f"`{OURS}` and at least one baseline must both run for a comparison."]
    lines = [
        f"Target: at least {TARGET_GAIN:.0%} more accepted jobs than the best baseline, or "
        f"equal acceptance (within {EQUAL_TOLERANCE:.1%} of the jobs) at lower cost and energy "
        "per accepted job. The best baseline at a load accepts the most jobs (ties: lower cost "
        "per job).",
        "",
        "| load | admission | baseline | accepted (pp) | accepted (rel.) | cost/job | energy/job "
        "| target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for st in standings:
        name = f"**{st.baseline}** (best)" if st.best else st.baseline
        lines.append(
            f"| {st.load:g} | {st.admission} | {name} | {st.accepted_pp:+.2f} | "
            f"{st.accepted_rel:+.1%} | "
            f"{st.cost_per_job_rel:+.1%} | {st.energy_per_job_rel:+.1%} | "
            f"{'met' if st.target_met else 'not met'} |"
        )
    lines.append("")
    for st in (st for st in standings if st.best):
        same = [s for s in summaries if s.load == st.load and s.admission == st.admission]
        ours = next(s for s in same if s.policy == OURS)
        best = next(s for s in same if s.policy == st.baseline)
        lines.append(
            f"- load {st.load:g}, admission {st.admission}: `{OURS}` accepts "
            f"{ours.accepted:,} jobs "
            f"({ours.accepted_share:.2%}), the best baseline `{best.policy}` {best.accepted:,} "
            f"({best.accepted_share:.2%}): {st.accepted_pp:+.2f} pp, {st.accepted_rel:+.1%}; "
            f"cost per accepted job {ours.cost_per_accepted_cny:,.2f} vs "
            f"{best.cost_per_accepted_cny:,.2f} CNY ({st.cost_per_job_rel:+.1%}), energy "
            f"{ours.energy_per_accepted_kwh:,.3f} vs {best.energy_per_accepted_kwh:,.3f} kWh "
            f"({st.energy_per_job_rel:+.1%}): target {'met' if st.target_met else 'not met'}."
        )
    return lines
