"""Convert the Alibaba GPU cluster trace v2023 pod lists into trace jobs.

Source: the "openb" pod lists of github.com/alibaba/clusterdata, `cluster-trace-gpu-v2023`
(Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent", USENIX ATC '23); for research or study use. Columns read: name, cpu_milli,
memory_mib, num_gpu, gpu_milli, gpu_spec, qos, creation_time, deletion_time, scheduled_time
(pod_phase is not used). Rules, one pod at a time, in file order:

- **Skipped** (counted by reason in `ConversionReport.skipped`): `never_scheduled` (empty
  scheduled_time: the pod was still pending), `no_deletion_time` (empty deletion_time),
  `non_positive_duration` (deletion_time <= scheduled_time), `no_accelerators_on_map` (a GPU pod
  while the map has no accelerator at all).
- **id** = name. **arrival_s** = creation_time minus the smallest creation_time of the file
  (skipped pods included). **duration_s** = deletion_time - scheduled_time; pods still running
  at the end of the trace carry the trace's end as deletion_time, so their duration is cut there.
- **cpu** = cpu_milli / 1000 cores; **memory_gib** = memory_mib / 1024.
- **accelerator_count** = num_gpu, on one node (a pod runs on one node; its request asks for
  `nodes` 1, `TraceJob.to_request`). A pod with num_gpu == 1 and gpu_milli < 1000 shares one
  GPU with others: it asks that fraction of one, **accelerator_milli** = gpu_milli rounded
  to a whole thousandth, at least 1 (counted in `shared_gpu_pods`).
- **accelerator_model** (GPU pods only): the first type listed in gpu_spec ('|'-separated) when
  it is not empty, else a type drawn with the weights of `TRACE_GPU_COUNTS` (the GPUs of each
  type among the trace's GPU nodes). The type maps to a catalog model by `TRACE_MODEL_MAP`
  (T4 -> T4; P100, V100M16, V100M32 -> V100; A10 -> L40S; G2, G3 (undisclosed) -> A100). When
  the map has no accelerator of that model, the map's most common model (most accelerators over
  all sites) is taken instead (counted in `model_fallbacks`). A gpu_spec type outside the table
  raises TraceError.
- **workload_class**: with GPUs, inference when qos is latency-sensitive (LS or Guaranteed),
  training otherwise (BE, Burstable); without GPUs, service when qos is LS or Guaranteed, batch
  otherwise.
- **constraints**: inference and service: max_latency_ms 40, min_bandwidth_gbps 0.5; training:
  min_bandwidth_gbps 5; batch: none.
- **source_province**: drawn with the weights of the map's province `demand_weight` (uniform
  when they are all zero). **tenant**: `tenant-<k>`, k drawn uniformly from 1..`tenants`.

**Lists without times** (the multigpu50 variant has only name, cpu_milli, memory_mib, num_gpu
and gpu_milli): gpu_spec and qos are taken as empty (a drawn GPU type; best effort), and the
pods arrive in file order, one every `UNTIMED_SPACING_S` (60 s), each running
`UNTIMED_DURATION_S` (24 h): the list fills the map as its pods fill a cluster in the FGD
experiments, where they arrive one after another and stay. A list with some time columns but
not all is refused (TraceError naming the first missing one).

Draws come from three generators seeded from `seed` (province, tenant, GPU type), so the result
is the same for the same file, map and seed.
"""

import csv
import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final

from cnbrain.domain.enums import WorkloadClass
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.simulate.trace import TraceJob
from cnbrain.simulate.trace_draws import WeightedChoice, most_common_model, province_choice
from cnbrain.simulate.trace_files import TraceError

TRACE_MODEL_MAP: Final[Mapping[str, str]] = MappingProxyType(
    {
        "T4": "T4",
        "P100": "V100",
        "V100M16": "V100",
        "V100M32": "V100",
        "A10": "L40S",
        "G2": "A100",
        "G3": "A100",
    }
)
"""GPU type of the trace -> catalog model. P100 has no catalog model and goes to its successor;
A10 (Ampere, inference) to the catalog's nearest data-centre inference card; G2 and G3 are
undisclosed types and are taken as the catalog's common training card."""

TRACE_GPU_COUNTS: Final[Mapping[str, int]] = MappingProxyType(
    {"G2": 4392, "T4": 842, "G3": 312, "P100": 265, "V100M32": 204, "V100M16": 195, "A10": 2}
)
"""GPUs of each type in the trace's 1213 GPU nodes (the `gpu` column of
openb_node_list_gpu_node.csv summed per `model`), from Alibaba cluster-trace-gpu-v2023
(Weng et al., USENIX ATC '23), github.com/alibaba/clusterdata; research or study use."""

LATENCY_SENSITIVE_QOS: Final = frozenset({"LS", "Guaranteed"})
INTERACTIVE_MAX_LATENCY_MS: Final = 40.0
INTERACTIVE_MIN_BANDWIDTH_GBPS: Final = 0.5
TRAINING_MIN_BANDWIDTH_GBPS: Final = 5.0

POD_COLUMNS: Final = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
"""The columns every pod list has."""
TIME_COLUMNS: Final = ("creation_time", "deletion_time", "scheduled_time")
"""The columns of a list with times: all of them, or none (module docstring)."""
UNTIMED_SPACING_S: Final = 60.0
UNTIMED_DURATION_S: Final = 24 * 3600.0

NEVER_SCHEDULED: Final = "never_scheduled"
NO_DELETION_TIME: Final = "no_deletion_time"
NON_POSITIVE_DURATION: Final = "non_positive_duration"
NO_ACCELERATORS_ON_MAP: Final = "no_accelerators_on_map"


@dataclass(frozen=True, slots=True)
class ConversionReport:
    """What a conversion did. `skipped` maps a reason to its count; `model_fallbacks` maps
    `"<model>-><fallback>"` to the GPU pods whose mapped model the map lacks."""

    pods: int
    jobs: int
    skipped: Mapping[str, int] = field(default_factory=dict)
    shared_gpu_pods: int = 0
    drawn_models: int = 0
    model_fallbacks: Mapping[str, int] = field(default_factory=dict)

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    def summary(self) -> str:
        """One line: pods read, jobs kept, skipped by reason, shared and drawn GPUs."""
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(self.skipped.items())) or "none"
        fallbacks = ", ".join(f"{k} {v}" for k, v in sorted(self.model_fallbacks.items()))
        return (
            f"{self.pods} pods -> {self.jobs} jobs; skipped {self.skipped_total} ({reasons}); "
            f"{self.shared_gpu_pods} shared-GPU pods asking a fraction of one; "
            f"{self.drawn_models} GPU models drawn"
            + (f"; model fallbacks: {fallbacks}" if fallbacks else "")
        )


@dataclass(frozen=True, slots=True)
class _Pod:
    line: int
    name: str
    cpu_milli: float
    memory_mib: float
    num_gpu: int
    gpu_milli: float
    gpu_spec: str
    qos: str
    creation: float
    deletion: float | None
    scheduled: float | None


def convert_alibaba_pods(
    pod_csv: Path, *, cmap: ComputeNetworkMap, seed: int, tenants: int = 8
) -> tuple[list[TraceJob], ConversionReport]:
    """The jobs of the v2023 pod list `pod_csv` on `cmap` (rules in the module docstring), in
    trace order (arrival, then id), and what the conversion did.

    Raises TraceError naming the file, line and column of the first malformed cell, and
    ValueError when `tenants` < 1.
    """
    if tenants < 1:
        raise ValueError(f"tenants must be at least 1, not {tenants}")
    pods = _read_pods(pod_csv)
    start = min((pod.creation for pod in pods), default=0.0)
    provinces = province_choice(cmap)
    trace_types = WeightedChoice(tuple(TRACE_GPU_COUNTS), tuple(TRACE_GPU_COUNTS.values()))
    rng_province = random.Random(f"alibaba-province:{seed}")
    rng_tenant = random.Random(f"alibaba-tenant:{seed}")
    rng_model = random.Random(f"alibaba-gpu-type:{seed}")
    fallback = most_common_model(cmap)
    skipped: Counter[str] = Counter()
    fallbacks: Counter[str] = Counter()
    shared = drawn = 0
    jobs: list[TraceJob] = []
    for pod in pods:
        reason = _skip_reason(pod, has_accelerators=fallback is not None)
        if reason is not None:
            skipped[reason] += 1
            continue
        assert pod.scheduled is not None and pod.deletion is not None
        model: str | None = None
        milli: int | None = None
        if pod.num_gpu > 0:
            if pod.num_gpu == 1 and pod.gpu_milli < 1000:
                shared += 1
                milli = min(999, max(1, round(pod.gpu_milli)))
            spec = pod.gpu_spec.split("|")[0].strip()
            if not spec:
                spec = trace_types.draw(rng_model)
                drawn += 1
            model = _catalog_model(pod_csv, pod, spec)
            if model not in cmap.accelerator_models:
                assert fallback is not None
                fallbacks[f"{model}->{fallback}"] += 1
                model = fallback
        workload = pod_class(pod.num_gpu, pod.qos)
        latency, bandwidth = class_constraints(workload)
        jobs.append(
            TraceJob(
                id=pod.name,
                arrival_s=pod.creation - start,
                duration_s=pod.deletion - pod.scheduled,
                source_province=provinces.draw(rng_province),
                workload_class=workload,
                tenant=f"tenant-{rng_tenant.randint(1, tenants)}",
                cpu=pod.cpu_milli / 1000,
                memory_gib=pod.memory_mib / 1024,
                accelerator_model=model,
                accelerator_count=pod.num_gpu,
                accelerator_milli=milli,
                max_latency_ms=latency,
                min_bandwidth_gbps=bandwidth,
            )
        )
    jobs.sort(key=lambda job: (job.arrival_s, job.id))
    report = ConversionReport(
        pods=len(pods),
        jobs=len(jobs),
        skipped=dict(skipped),
        shared_gpu_pods=shared,
        drawn_models=drawn,
        model_fallbacks=dict(fallbacks),
    )
    return jobs, report


def pod_class(num_gpu: int, qos: str) -> WorkloadClass:
    """The workload class of a pod with `num_gpu` GPUs and QoS class `qos`."""
    interactive = qos in LATENCY_SENSITIVE_QOS
    if num_gpu > 0:
        return WorkloadClass.INFERENCE if interactive else WorkloadClass.TRAINING
    return WorkloadClass.SERVICE if interactive else WorkloadClass.BATCH


def class_constraints(workload: WorkloadClass) -> tuple[float | None, float]:
    """(max_latency_ms, min_bandwidth_gbps) a converted job of class `workload` carries."""
    if workload in (WorkloadClass.INFERENCE, WorkloadClass.SERVICE):
        return INTERACTIVE_MAX_LATENCY_MS, INTERACTIVE_MIN_BANDWIDTH_GBPS
    if workload is WorkloadClass.TRAINING:
        return None, TRAINING_MIN_BANDWIDTH_GBPS
    return None, 0.0


def _skip_reason(pod: _Pod, *, has_accelerators: bool) -> str | None:
    if pod.scheduled is None:
        return NEVER_SCHEDULED
    if pod.deletion is None:
        return NO_DELETION_TIME
    if pod.deletion - pod.scheduled <= 0:
        return NON_POSITIVE_DURATION
    if pod.num_gpu > 0 and not has_accelerators:
        return NO_ACCELERATORS_ON_MAP
    return None


def _catalog_model(path: Path, pod: _Pod, trace_type: str) -> str:
    model = TRACE_MODEL_MAP.get(trace_type)
    if model is None:
        raise TraceError(
            path,
            pod.line,
            "gpu_spec",
            f"unknown GPU type {trace_type!r}; known: {', '.join(TRACE_MODEL_MAP)}",
        )
    return model


def _read_pods(path: Path) -> list[_Pod]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as stream:
            reader = csv.DictReader(stream)
            columns = reader.fieldnames or ()
            times = [c for c in TIME_COLUMNS if c in columns]
            needed = POD_COLUMNS + (TIME_COLUMNS if times else ())
            missing = [c for c in needed if c not in columns]
            if missing:
                raise TraceError(path, 1, missing[0], "required column of a pod list is missing")
            pods = [
                _pod(path, reader.line_num, row, index=None if times else index)
                for index, row in enumerate(reader)
            ]
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(path, None, None, f"cannot read the pod list ({exc})") from None
    first_line: dict[str, int] = {}
    for pod in pods:
        if pod.name in first_line:
            raise TraceError(
                path,
                pod.line,
                "name",
                f"{pod.name!r} is already the name of line {first_line[pod.name]}",
            )
        first_line[pod.name] = pod.line
    return pods


def _pod(path: Path, line: int, row: Mapping[str, str | None], *, index: int | None) -> _Pod:
    """The pod of `row`; with `index`, the `index`-th pod of a list without times, which
    gets the times the module docstring gives it."""

    def number(column: str, *, optional: bool = False) -> float | None:
        text = (row.get(column) or "").strip()
        if not text:
            if optional:
                return None
            raise TraceError(path, line, column, "empty cell; a number is required")
        try:
            value = float(text)
        except ValueError:
            raise TraceError(path, line, column, f"{text!r} is not a number") from None
        if not (0 <= value < float("inf")):
            raise TraceError(path, line, column, f"{text!r} must be finite and non-negative")
        return value

    if index is None:
        creation = number("creation_time") or 0.0
        deletion = number("deletion_time", optional=True)
        scheduled = number("scheduled_time", optional=True)
    else:
        creation = scheduled = index * UNTIMED_SPACING_S
        deletion = creation + UNTIMED_DURATION_S
    num_gpu = number("num_gpu")
    assert num_gpu is not None
    if num_gpu != int(num_gpu):
        raise TraceError(path, line, "num_gpu", f"{num_gpu} is not a whole number")
    name = (row.get("name") or "").strip()
    if not name:
        raise TraceError(path, line, "name", "empty cell; every pod needs a name")
    return _Pod(
        line=line,
        name=name,
        cpu_milli=number("cpu_milli") or 0.0,
        memory_mib=number("memory_mib") or 0.0,
        num_gpu=int(num_gpu),
        gpu_milli=number("gpu_milli", optional=True) or 0.0,
        gpu_spec=(row.get("gpu_spec") or "").strip(),
        qos=(row.get("qos") or "").strip(),
        creation=creation,
        deletion=deletion,
        scheduled=scheduled,
    )
