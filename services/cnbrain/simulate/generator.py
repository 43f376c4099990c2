"""A seeded synthetic trace: diurnal Poisson arrivals of training, inference, batch and service.

Arrivals: a non-homogeneous Poisson process with rate proportional to `diurnal_rate(t)` =
1 + 0.6 sin(2π(t/86400 - 0.25)) (trough 0.4 at 00:00 of trace time, peak 1.6 at 12:00),
conditioned on exactly `jobs` arrivals in [0, hours): candidate times are drawn uniformly
over the horizon and each is kept with probability diurnal_rate(t) / 1.6 (thinning) until
`jobs` are kept; they are then sorted.

Each job, in arrival order, draws its class from `mix` (default `DEFAULT_MIX`), its source
province by the map's `demand_weight`, a tenant `tenant-<k>` (k in 1..8), and then its
shape by class (durations are lognormal, given as median and log-space sigma, clamped):

- training: 4, 8 or 16 accelerators (weights 0.4/0.4/0.2) with 8 cores and 64 GiB each;
  median 4 h, sigma 1.0, 30 min - 72 h; min_bandwidth_gbps 5.
- inference: 1 or 2 accelerators (0.7/0.3) with 4 cores and 32 GiB each; median 1 h,
  sigma 1.0, 5 min - 24 h; max_latency_ms 40, min_bandwidth_gbps 0.5.
- batch: 2, 4, 8, 16 or 32 cores (equally likely), 4 GiB per core; median 1 h, sigma 1.0,
  10 min - 6 h; no constraint.
- service: 1, 2, 4 or 8 cores (equally likely), 4 GiB per core; median 24 h, sigma 0.8,
  1 h - 14 d; max_latency_ms 40, min_bandwidth_gbps 0.5.

The accelerator model is drawn among the map's models weighted by how many accelerators of each
the map has. Job ids are `syn-<n>` with n the 0-based arrival rank, zero-padded to 6 digits.
"""

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from cnbrain.domain.enums import WorkloadClass
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.simulate.trace import TraceJob
from cnbrain.simulate.trace_draws import WeightedChoice, accelerator_counts, province_choice

DAY_S: Final = 86400.0
DIURNAL_AMPLITUDE: Final = 0.6
SYNTHETIC_TENANTS: Final = 8

DEFAULT_MIX: Final[Mapping[WorkloadClass, float]] = MappingProxyType(
    {
        WorkloadClass.TRAINING: 0.15,
        WorkloadClass.INFERENCE: 0.35,
        WorkloadClass.BATCH: 0.35,
        WorkloadClass.SERVICE: 0.15,
    }
)


@dataclass(frozen=True, slots=True)
class _Shape:
    """How one class of job is drawn: a size among `sizes` (accelerators when `accelerated`,
    else CPU cores), cores and GiB per size unit, a clamped lognormal duration, constraints."""

    accelerated: bool
    sizes: tuple[int, ...]
    size_weights: tuple[float, ...]
    cores_per_unit: float
    gib_per_unit: float
    median_s: float
    sigma: float
    min_s: float
    max_s: float
    max_latency_ms: float | None = None
    min_bandwidth_gbps: float = 0.0


_SHAPES: Final[Mapping[WorkloadClass, _Shape]] = MappingProxyType(
    {
        WorkloadClass.TRAINING: _Shape(
            accelerated=True,
            sizes=(4, 8, 16),
            size_weights=(0.4, 0.4, 0.2),
            cores_per_unit=8.0,
            gib_per_unit=64.0,
            median_s=4 * 3600,
            sigma=1.0,
            min_s=1800,
            max_s=72 * 3600,
            min_bandwidth_gbps=5.0,
        ),
        WorkloadClass.INFERENCE: _Shape(
            accelerated=True,
            sizes=(1, 2),
            size_weights=(0.7, 0.3),
            cores_per_unit=4.0,
            gib_per_unit=32.0,
            median_s=3600,
            sigma=1.0,
            min_s=300,
            max_s=24 * 3600,
            max_latency_ms=40.0,
            min_bandwidth_gbps=0.5,
        ),
        WorkloadClass.BATCH: _Shape(
            accelerated=False,
            sizes=(2, 4, 8, 16, 32),
            size_weights=(1, 1, 1, 1, 1),
            cores_per_unit=1.0,
            gib_per_unit=4.0,
            median_s=3600,
            sigma=1.0,
            min_s=600,
            max_s=6 * 3600,
        ),
        WorkloadClass.SERVICE: _Shape(
            accelerated=False,
            sizes=(1, 2, 4, 8),
            size_weights=(1, 1, 1, 1),
            cores_per_unit=1.0,
            gib_per_unit=4.0,
            median_s=24 * 3600,
            sigma=0.8,
            min_s=3600,
            max_s=14 * DAY_S,
            max_latency_ms=40.0,
            min_bandwidth_gbps=0.5,
        ),
    }
)


def diurnal_rate(t_s: float) -> float:
    """Relative arrival rate at `t_s` seconds of trace time: 0.4 at midnight, 1.6 at noon."""
    return 1.0 + DIURNAL_AMPLITUDE * math.sin(2 * math.pi * (t_s / DAY_S - 0.25))


def synthetic_trace(
    *,
    cmap: ComputeNetworkMap,
    jobs: int,
    hours: float,
    seed: int,
    mix: Mapping[WorkloadClass, float] | None = None,
) -> list[TraceJob]:
    """`jobs` synthetic jobs over `hours` hours on `cmap` (rules in the module docstring), in
    trace order. The same arguments give the same trace.

    Raises ValueError when `jobs` < 0, `hours` is not a positive finite number, `mix` has a
    negative or non-finite weight or no positive one, or it asks for accelerated classes on a
    map without accelerators.
    """
    if jobs < 0:
        raise ValueError(f"jobs must be non-negative, not {jobs}")
    if not (0 < hours < math.inf):
        raise ValueError(f"hours must be a positive finite number, not {hours}")
    weights = dict(DEFAULT_MIX if mix is None else mix)
    if any(not (0 <= w < math.inf) for w in weights.values()) or sum(weights.values()) <= 0:
        raise ValueError(f"mix weights must be finite, non-negative, some positive: {weights}")
    classes = WeightedChoice(tuple(weights), tuple(weights.values()))
    counts = accelerator_counts(cmap)
    needs_accelerators = any(w > 0 and _SHAPES[c].accelerated for c, w in weights.items())
    if needs_accelerators and not counts:
        raise ValueError(
            f"map {cmap.name!r} has no accelerators; give a mix without training and inference"
        )
    models = WeightedChoice(tuple(counts), tuple(counts.values())) if counts else None
    arrivals = _arrivals(random.Random(f"synthetic-arrivals:{seed}"), jobs, hours * 3600)
    provinces = province_choice(cmap)
    rng = random.Random(f"synthetic-jobs:{seed}")
    trace = []
    for rank, arrival in enumerate(arrivals):
        workload = classes.draw(rng)
        shape = _SHAPES[workload]
        units = WeightedChoice(shape.sizes, shape.size_weights).draw(rng)
        duration = rng.lognormvariate(math.log(shape.median_s), shape.sigma)
        model = models.draw(rng) if shape.accelerated and models is not None else None
        trace.append(
            TraceJob(
                id=f"syn-{rank:06d}",
                arrival_s=arrival,
                duration_s=min(max(duration, shape.min_s), shape.max_s),
                source_province=provinces.draw(rng),
                workload_class=workload,
                tenant=f"tenant-{rng.randint(1, SYNTHETIC_TENANTS)}",
                cpu=units * shape.cores_per_unit,
                memory_gib=units * shape.gib_per_unit,
                accelerator_model=model,
                accelerator_count=units if model is not None else 0,
                max_latency_ms=shape.max_latency_ms,
                min_bandwidth_gbps=shape.min_bandwidth_gbps,
            )
        )
    return trace


def _arrivals(rng: random.Random, jobs: int, horizon_s: float) -> list[float]:
    """`jobs` sorted arrival times in [0, horizon_s) with density proportional to the diurnal
    rate, by thinning uniform candidates."""
    peak = 1.0 + DIURNAL_AMPLITUDE
    times: list[float] = []
    while len(times) < jobs:
        t = rng.random() * horizon_s
        if rng.random() * peak < diurnal_rate(t):
            times.append(t)
    return sorted(times)
