"""PNG plots of a policy comparison, drawn with matplotlib's Agg renderer (no display needed).

Figures are built with the object API (`matplotlib.figure.Figure`), never through pyplot, so no
global backend or figure state is touched.

Each function writes one file and returns its path; policies keep the same colour in every
plot (the order of first appearance in `summaries`).
"""

from collections.abc import Sequence
from pathlib import Path

from matplotlib import rcParams
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from cnbrain.simulate.metrics import SimulationSummary

ACCEPTANCE_PNG = "acceptance_vs_load.png"
UTILISATION_PNG = "utilisation_over_time.png"
COST_LATENCY_PNG = "cost_vs_latency.png"
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _policies(summaries: Sequence[SimulationSummary]) -> list[str]:
    return list(dict.fromkeys(s.policy for s in summaries))


def acceptance_vs_load(summaries: Sequence[SimulationSummary], out_dir: Path) -> Path:
    """Accepted share (%) against offered load, one line per policy."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for i, policy in enumerate(_policies(summaries)):
        runs = sorted((s for s in summaries if s.policy == policy), key=lambda s: s.load)
        ax.plot(
            [s.load for s in runs],
            [100 * s.accepted_share for s in runs],
            marker=MARKERS[i % len(MARKERS)],
            label=policy,
        )
    ax.set_xlabel("offered load (factor on the arrival rate)")
    ax.set_ylabel("accepted jobs (%)")
    ax.set_title("Acceptance vs offered load")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, out_dir / ACCEPTANCE_PNG)


def utilisation_over_time(summaries: Sequence[SimulationSummary], out_dir: Path) -> Path:
    """At the highest load: mean site utilisation, accelerator utilisation and mean link
    utilisation over time, one line per policy."""
    top = max(s.load for s in summaries)
    runs = [s for s in summaries if s.load == top]
    panels = (
        ("site_utilisation_mean", "mean site utilisation"),
        ("accelerator_utilisation", "accelerators in use"),
        ("link_utilisation_mean", "mean link utilisation"),
    )
    fig = Figure(figsize=(8, 8))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (key, label) in zip(axes, panels, strict=True):
        for run in runs:
            series = run.timeseries
            hours = [t / 3600 for t in series["time_s"]]
            ax.plot(hours, [100 * v for v in series[key]], label=run.policy, linewidth=1.2)
        ax.set_ylabel(f"{label} (%)")
        ax.grid(alpha=0.3)
    axes[0].set_title(f"Utilisation over time at offered load {top:g}")
    axes[0].legend(fontsize="small", ncol=2)
    axes[-1].set_xlabel("simulated time (hours)")
    return _save(fig, out_dir / UTILISATION_PNG)


def cost_vs_latency(summaries: Sequence[SimulationSummary], out_dir: Path) -> Path:
    """Cost per accepted job against mean path latency, one point per policy and load."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    colours = rcParams["axes.prop_cycle"].by_key()["color"]
    loads = sorted({s.load for s in summaries})
    for i, policy in enumerate(_policies(summaries)):
        for s in summaries:
            if s.policy != policy:
                continue
            ax.scatter(
                s.path_latency_mean_ms,
                s.cost_per_accepted_cny,
                color=colours[i % len(colours)],
                marker=MARKERS[loads.index(s.load) % len(MARKERS)],
                label=f"{policy} @ {s.load:g}",
            )
    ax.set_xlabel("mean path latency (ms)")
    ax.set_ylabel("cost per accepted job (CNY)")
    ax.set_title("Cost vs latency (marker: offered load)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small", ncol=2)
    return _save(fig, out_dir / COST_LATENCY_PNG)


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
