"""Request bodies the regional tests submit on the built-in `china` map."""

from typing import Any

GPU_TRAINING: dict[str, Any] = {
    "source_province": "ZJ",
    "resources": {"cpu": 32, "memory_gib": 256, "accelerator": {"model": "H800", "count": 8}},
    "constraints": {"max_latency_ms": 40, "min_bandwidth_gbps": 10, "interconnect": "ib"},
    "duration_hours": 24,
    "workload_class": "training",
}
LOCAL_CPU: dict[str, Any] = {
    "source_province": "GD",
    "resources": {"cpu": 8, "memory_gib": 32},
    "duration_hours": 2,
}
