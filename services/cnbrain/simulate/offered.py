"""How much a trace asks of a map, and rescaling it so that load 1 means "the map's capacity".

The simulator's `load` is a factor on a trace's own arrival rate. A trace recorded on another
cluster may offer a map far less (or more) than its capacity, so load 1.2 need not be an
overload. The offered load of a trace whose arrivals spread over a window of W seconds is,
per resource r (CPU cores, memory, each accelerator model the trace asks for):

    offered(r, W) = sum over jobs of amount_r x min(duration_s, W) / W / capacity(r)

the mean amount its jobs hold during the window, counting each job at most for the window's
length, over the map's total of r. With W the trace's own span (its last arrival; arrivals
start at 0) this is the load the trace offers at load 1 (`offered_load`). The *bottleneck* is
the resource with the highest value. offered(r, W) falls as W grows, from the sum of all
amounts (every job at once) down to 0.

`at_capacity` multiplies every arrival time by the factor f that makes the bottleneck's offered
load exactly 1 over the window f x span: at load 1 the trace then asks, on average over its
arrival window, for the map's whole capacity of its scarcest resource; durations are
unchanged. Capacity is nominal (policy, latency bounds and bandwidth may leave a job less),
and a trace whose arrivals bunch up offers its busy part more than the average.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.simulate.trace import TraceJob

BISECTION_STEPS = 200


@dataclass(frozen=True, slots=True)
class OfferedLoad:
    """The load a trace offers a map over an arrival window of `window_s` seconds."""

    window_s: float
    per_resource: Mapping[str, float]
    """Resource ("cpu", "memory" or an accelerator model) -> offered load; a model the map
    lacks is left out (its jobs can never be placed)."""
    bottleneck: str
    value: float


class _Demand:
    """Per resource: the amounts and durations of the jobs asking for it, and the capacity."""

    def __init__(self, cmap: ComputeNetworkMap, jobs: Sequence[TraceJob]) -> None:
        capacity: dict[str, float] = {"cpu": 0.0, "memory": 0.0}
        for site in cmap.sites:
            capacity["cpu"] += site.capacity.cpu_cores
            capacity["memory"] += site.capacity.memory_gib
            for model, count in site.capacity.accelerators.items():
                capacity[model] = capacity.get(model, 0.0) + count
        amounts: dict[str, list[tuple[float, float]]] = {"cpu": [], "memory": []}
        for j in jobs:
            amounts["cpu"].append((j.cpu, j.duration_s))
            amounts["memory"].append((j.memory_gib, j.duration_s))
            if j.accelerator_model and j.accelerator_count:
                amounts.setdefault(j.accelerator_model, []).append((j.accelerators, j.duration_s))
        self.columns = {
            r: (np.asarray([a for a, _ in rows]), np.asarray([d for _, d in rows]), capacity[r])
            for r, rows in sorted(amounts.items())
            if capacity.get(r, 0.0) > 0 and rows
        }

    def at(self, window_s: float) -> OfferedLoad:
        per = {
            r: float((amount * np.minimum(duration, window_s)).sum() / window_s / cap)
            for r, (amount, duration, cap) in self.columns.items()
        }
        bottleneck = max(per, key=lambda r: (per[r], r))
        return OfferedLoad(
            window_s=window_s, per_resource=per, bottleneck=bottleneck, value=per[bottleneck]
        )


def _span(jobs: Sequence[TraceJob]) -> float:
    span = max((j.arrival_s for j in jobs), default=0.0)
    if span <= 0:
        raise ValueError("the trace's arrivals span no time; its offered load is undefined")
    return span


def offered_load(cmap: ComputeNetworkMap, jobs: Sequence[TraceJob]) -> OfferedLoad:
    """The load the trace offers `cmap` at load 1 (window = its own span; see the module
    docstring). ValueError when the arrivals span no time."""
    return _Demand(cmap, jobs).at(_span(jobs))


def capacity_factor(cmap: ComputeNetworkMap, jobs: Sequence[TraceJob]) -> tuple[float, OfferedLoad]:
    """The factor f on arrival times that makes the trace's offered load exactly 1 (see the
    module docstring), and that offered load. ValueError when the arrivals span no time, or
    when even all jobs at once ask for less than the map has of every resource."""
    span = _span(jobs)
    demand = _Demand(cmap, jobs)
    lo, hi = span * 1e-9, span * 1e9
    if demand.at(lo).value < 1:
        raise ValueError(
            "even all at once the trace's jobs ask for less than the map's capacity of every "
            "resource: no arrival rate loads the map to 1"
        )
    for _ in range(BISECTION_STEPS):
        mid = (lo * hi) ** 0.5
        if demand.at(mid).value >= 1:
            lo = mid
        else:
            hi = mid
    offered = demand.at(lo)
    return lo / span, offered


def scaled(jobs: Sequence[TraceJob], factor: float) -> list[TraceJob]:
    """`jobs` with every arrival time multiplied by `factor` (durations unchanged)."""
    return [j.model_copy(update={"arrival_s": j.arrival_s * factor}) for j in jobs]
