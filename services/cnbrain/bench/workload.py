"""A seeded generator of realistic placement requests for a map.

Source provinces are drawn by the map's demand weights. The mix: training (4-16 accelerators
of a model the map has, long, energy-minded), inference (1-2 accelerators, latency bound,
latency-minded), batch (CPU only, cost-minded) and service (CPU, latency bound, bandwidth).
"""

import numpy as np

from cnbrain.domain.request import PlacementRequest, ResourceDemand
from cnbrain.netmap.compute_map import ComputeNetworkMap

CLASS_MIX = (("training", 0.25), ("inference", 0.3), ("batch", 0.3), ("service", 0.15))


def random_requests(cmap: ComputeNetworkMap, *, count: int, seed: int) -> list[PlacementRequest]:
    """`count` requests, identical for the same map and seed."""
    rng = np.random.default_rng(seed)
    codes = list(cmap.province_codes)
    weights = np.asarray([cmap.provinces[c].demand_weight for c in codes], dtype=float)
    weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(codes), 1 / len(codes))
    models: list[str | None] = [*cmap.accelerator_models] or [None]
    classes = [c for c, _ in CLASS_MIX]
    shares = np.asarray([s for _, s in CLASS_MIX])
    out = []
    for i in range(count):
        province = codes[int(rng.choice(len(codes), p=weights))]
        kind = classes[int(rng.choice(len(classes), p=shares))]
        raw: dict[str, object] = {
            "id": f"req-{seed}-{i}",
            "source_province": province,
            "workload_class": kind,
            "priority": int(rng.integers(0, 4)),
            "objective": {
                k: float(rng.choice([0.5, 1.0, 2.0]))
                for k in ("cost", "latency", "energy", "balance")
            },
        }
        model = models[int(rng.integers(len(models)))]
        if kind == "training" and model:
            raw["resources"] = ResourceDemand.of_totals(
                cpu=float(rng.choice([32, 64, 128])),
                memory_gib=float(rng.choice([256, 512, 1024])),
                model=model,
                count=int(rng.choice([4, 8, 16])),
            ).model_dump()
            raw["duration_hours"] = float(rng.choice([4, 12, 24, 72]))
            raw["constraints"] = {"min_bandwidth_gbps": float(rng.choice([1, 5, 10]))}
        elif kind == "inference" and model:
            raw["resources"] = {
                "cpu": float(rng.choice([4, 8, 16])),
                "memory_gib": float(rng.choice([32, 64])),
                "accelerator": {"model": model, "count": int(rng.choice([1, 2]))},
            }
            raw["duration_hours"] = float(rng.choice([1, 8, 24]))
            raw["constraints"] = {
                "max_latency_ms": float(rng.choice([10, 20, 40])),
                "min_bandwidth_gbps": float(rng.choice([0.5, 1, 2])),
            }
        elif kind == "service":
            raw["resources"] = {
                "cpu": float(rng.choice([2, 4, 8])),
                "memory_gib": float(rng.choice([8, 16])),
            }
            raw["duration_hours"] = float(rng.choice([24, 168]))
            raw["constraints"] = {
                "max_latency_ms": float(rng.choice([15, 30])),
                "min_bandwidth_gbps": float(rng.choice([0.1, 0.5])),
            }
        else:
            raw["resources"] = {
                "cpu": float(rng.choice([8, 16, 32, 64])),
                "memory_gib": float(rng.choice([32, 64, 128])),
            }
            raw["duration_hours"] = float(rng.choice([1, 2, 6]))
        out.append(PlacementRequest.model_validate(raw))
    return out
