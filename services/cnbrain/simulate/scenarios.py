"""The scenario suite of the flow simulation: named, seeded workloads that move data.

Each scenario is a map, a rule that draws a trace of jobs with flows from a seed, and the
longest each class of job may wait to start. `cnbrain simulate --scenario NAME` runs one;
docs/simulator.md ("Scenarios") states the rules and where their numbers come from. Every
number below is an assumption of the scenario, chosen to make one resource bind, not a
measurement.

- `east-data-west-compute`: the national policy of that name on the built-in map `china`
  (the Chinanet backbone): users in the eastern demand provinces; training datasets in the
  eastern hub clusters, staged at up to 10 Gbps to wherever the job trains (eastern or
  western hubs), results sent back home; inference serving eastern users within 20 ms.
- `national-training`: training from every province on `china`, datasets at a hub or a
  site of the home province, accelerators the binding resource.
- `inference-edge`: inference from every province on `china`, serving its users within 10
  ms at the edge and provincial sites, with some fine-tuning jobs that stage their data from
  home.

The draws take a `random.Random` seeded from the scenario's name and the seed, with the
converter's and generator's weighted choices (`cnbrain.simulate.trace_draws`), so a seed
gives the same trace on every run and platform.
"""

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from cnbrain.domain.enums import SiteKind, WorkloadClass
from cnbrain.domain.flows import Delivery, Endpoint, Flows, Serving, Staging
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.simulate.trace import TraceJob
from cnbrain.simulate.trace_draws import WeightedChoice, province_choice

SCENARIO_TENANTS: Final = 8
"""Jobs belong to tenants `tenant-1` to `tenant-8`, drawn uniformly."""

EAST_DEMAND: Final = ("BJ", "TJ", "HE", "SH", "JS", "ZJ", "AH", "GD")
"""The provinces of the eastern demand-side hubs (Beijing-Tianjin-Hebei, the Yangtze River
Delta, the Greater Bay Area)."""

EAST_DATA_HUBS: Final = ("HE", "SH", "AH", "GD")
"""Provinces whose hub clusters hold the eastern datasets (zone `east` of hubs.csv, the
coastal ones)."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named workload: its map, its trace rule (`draw(cmap, jobs, hours, seed)`: `jobs`
    arrivals over `hours`, drawn from `seed`) with its default size, the longest each
    workload class may wait to start (seconds), and what it is meant to show."""

    name: str
    map_spec: str
    summary: str
    jobs: int
    hours: float
    max_wait_s: Mapping[WorkloadClass, float]
    draw: Callable[[ComputeNetworkMap, int, float, int], list[TraceJob]]


def _lognormal(rng: random.Random, median: float, sigma: float, lo: float, hi: float) -> float:
    """A lognormal draw given by its median and log-space sigma, clamped to [lo, hi]."""
    return min(hi, max(lo, rng.lognormvariate(math.log(median), sigma)))


def _arrivals(rng: random.Random, jobs: int, hours: float) -> list[float]:
    return sorted(rng.random() * hours * 3600 for _ in range(jobs))


def _hub_site(cmap: ComputeNetworkMap, province: str) -> str:
    return next(s.id for s in cmap.sites if s.province == province and s.kind == SiteKind.HUB)


def _training(
    rng: random.Random,
    *,
    job_id: str,
    arrival: float,
    province: str,
    model: str,
    gpus: int,
    hours: float,
    dataset: Endpoint,
    volume_gb: float,
    max_rate_gbps: float | None = 10.0,
) -> TraceJob:
    return TraceJob(
        id=job_id,
        arrival_s=arrival,
        duration_s=hours * 3600,
        source_province=province,
        workload_class=WorkloadClass.TRAINING,
        tenant=f"tenant-{rng.randint(1, SCENARIO_TENANTS)}",
        cpu=8.0 * gpus,
        memory_gib=64.0 * gpus,
        accelerator_model=model,
        accelerator_count=gpus,
        flows=Flows(
            staging=(Staging(source=dataset, volume_gb=volume_gb, max_rate_gbps=max_rate_gbps),),
            delivery=(
                Delivery(
                    destination=Endpoint(province=province),
                    volume_gb=max(1.0, round(volume_gb * 0.05, 1)),
                    max_rate_gbps=max_rate_gbps,
                ),
            ),
        ),
    )


def _inference(
    rng: random.Random,
    *,
    job_id: str,
    arrival: float,
    provinces: tuple[str, ...],
    model: str,
    gpus: int,
    hours: float,
    rate_gbps: float,
    max_latency_ms: float,
) -> TraceJob:
    return TraceJob(
        id=job_id,
        arrival_s=arrival,
        duration_s=hours * 3600,
        source_province=provinces[0],
        workload_class=WorkloadClass.INFERENCE,
        tenant=f"tenant-{rng.randint(1, SCENARIO_TENANTS)}",
        cpu=4.0 * gpus,
        memory_gib=32.0 * gpus,
        accelerator_model=model,
        accelerator_count=gpus,
        max_latency_ms=max_latency_ms,
        flows=Flows(
            serving=Serving(provinces=provinces, rate_gbps=rate_gbps, max_latency_ms=max_latency_ms)
        ),
    )


def _east_data_west_compute(
    cmap: ComputeNetworkMap, jobs: int, hours: float, seed: int
) -> list[TraceJob]:
    rng = random.Random(f"east-data-west-compute:{seed}")
    east = WeightedChoice(EAST_DEMAND, [cmap.provinces[p].demand_weight for p in EAST_DEMAND])
    hubs = [_hub_site(cmap, p) for p in EAST_DATA_HUBS]
    training_gpus = WeightedChoice((8, 16, 32), (0.4, 0.4, 0.2))
    inference_gpus = WeightedChoice((1, 2, 4, 8), (0.4, 0.3, 0.2, 0.1))
    out: list[TraceJob] = []
    for i, arrival in enumerate(_arrivals(rng, jobs, hours)):
        province = east.draw(rng)
        model = rng.choice(("A100", "H800"))
        if rng.random() < 0.3:
            out.append(
                _training(
                    rng,
                    job_id=f"edwc-{i:05d}",
                    arrival=arrival,
                    province=province,
                    model=model,
                    gpus=training_gpus.draw(rng),
                    hours=_lognormal(rng, 8, 0.8, 1, 48),
                    dataset=Endpoint(site=rng.choice(hubs)),
                    volume_gb=round(_lognormal(rng, 2000, 1.0, 200, 20000), 1),
                )
            )
        else:
            nearby = tuple(p for p in EAST_DEMAND if p != province)
            extra = (rng.choice(nearby),) if rng.random() < 0.5 else ()
            out.append(
                _inference(
                    rng,
                    job_id=f"edwc-{i:05d}",
                    arrival=arrival,
                    provinces=(province, *extra),
                    model=model,
                    gpus=inference_gpus.draw(rng),
                    hours=_lognormal(rng, 2, 0.8, 0.25, 12),
                    rate_gbps=1.0,
                    max_latency_ms=20.0,
                )
            )
    return out


def _national_training(
    cmap: ComputeNetworkMap, jobs: int, hours: float, seed: int
) -> list[TraceJob]:
    rng = random.Random(f"national-training:{seed}")
    provinces = province_choice(cmap)
    hubs = [s.id for s in cmap.sites if s.kind == SiteKind.HUB]
    gpus = WeightedChoice((16, 32, 64, 128), (0.35, 0.35, 0.2, 0.1))
    out: list[TraceJob] = []
    for i, arrival in enumerate(_arrivals(rng, jobs, hours)):
        province = provinces.draw(rng)
        dataset = (
            Endpoint(site=rng.choice(hubs)) if rng.random() < 0.5 else Endpoint(province=province)
        )
        out.append(
            _training(
                rng,
                job_id=f"nt-{i:05d}",
                arrival=arrival,
                province=province,
                model=rng.choice(("A100", "H800", "Ascend910B")),
                gpus=gpus.draw(rng),
                hours=_lognormal(rng, 12, 0.8, 2, 72),
                dataset=dataset,
                volume_gb=round(_lognormal(rng, 5000, 1.0, 500, 50000), 1),
                max_rate_gbps=None,
            )
        )
    return out


def _inference_edge(cmap: ComputeNetworkMap, jobs: int, hours: float, seed: int) -> list[TraceJob]:
    rng = random.Random(f"inference-edge:{seed}")
    provinces = province_choice(cmap)
    tuning_gpus = WeightedChoice((4, 8, 16), (0.4, 0.4, 0.2))
    inference_gpus = WeightedChoice((1, 2), (0.7, 0.3))
    out: list[TraceJob] = []
    for i, arrival in enumerate(_arrivals(rng, jobs, hours)):
        province = provinces.draw(rng)
        model = rng.choice(("T4", "L40S"))
        if rng.random() < 0.15:
            out.append(
                _training(
                    rng,
                    job_id=f"edge-{i:05d}",
                    arrival=arrival,
                    province=province,
                    model=model,
                    gpus=tuning_gpus.draw(rng),
                    hours=_lognormal(rng, 4, 0.8, 0.5, 24),
                    dataset=Endpoint(province=province),
                    volume_gb=round(_lognormal(rng, 500, 1.0, 50, 5000), 1),
                )
            )
            continue
        out.append(
            _inference(
                rng,
                job_id=f"edge-{i:05d}",
                arrival=arrival,
                provinces=(province,),
                model=model,
                gpus=inference_gpus.draw(rng),
                hours=_lognormal(rng, 1, 0.8, 0.1, 8),
                rate_gbps=0.5,
                max_latency_ms=10.0,
            )
        )
    return out


_WAITS: Final = MappingProxyType(
    {
        WorkloadClass.TRAINING: 6 * 3600.0,
        WorkloadClass.BATCH: 6 * 3600.0,
        WorkloadClass.INFERENCE: 600.0,
        WorkloadClass.SERVICE: 600.0,
    }
)
"""Training and batch may wait six hours to start, inference and services ten minutes."""

SCENARIOS: Final[Mapping[str, Scenario]] = MappingProxyType(
    {
        s.name: s
        for s in (
            Scenario(
                "east-data-west-compute",
                "china",
                "eastern datasets, training in eastern or western hubs, inference for eastern "
                "users within 20 ms",
                2000,
                96.0,
                _WAITS,
                _east_data_west_compute,
            ),
            Scenario(
                "national-training",
                "china",
                "training from every province; accelerators bind",
                1500,
                96.0,
                _WAITS,
                _national_training,
            ),
            Scenario(
                "inference-edge",
                "china",
                "inference within 10 ms of its users, with some fine-tuning",
                3000,
                48.0,
                _WAITS,
                _inference_edge,
            ),
        )
    }
)
"""Every scenario of the suite, by name."""
