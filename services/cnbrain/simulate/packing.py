"""The fragmentation experiment: one cluster's nodes, one list of tasks, and how many of the
cluster's accelerators each packing policy strands (`placement.fragmentation`).

It follows the method of the FGD paper on the Alibaba GPU cluster trace v2023 ("openb"):
tasks are drawn at random, with replacement, from the list, and arrive one by one without
ever leaving, until what they ask of the cluster's devices reaches `load` times what it has;
each is placed on a node at once, or refused when no node fits. The draws depend on the seed
alone, so every policy sees the same arrivals. The lists need no times, which lets the
`multigpu50` list (five columns: no times, GPU models or QoS) run as the others do.

Per run: tasks arrived and placed; the device share asked and placed; the devices left
unallocated; the devices **stranded** (left unallocated although the arrivals asked for them:
unallocated beyond what the arrivals left free, so the device share of refused tasks below
load 1, every unallocated device above it); of the devices unallocated, the free share of
those partly used (slivers that only small shares can use); and the fragmentation of the
workload (the policy-independent measure of the paper, in devices).

Files: nodes as `sn,cpu_milli,memory_mib,gpu,model` (`openb_node_list_*.csv`); tasks as
`name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]` (`openb_pod_list_*.csv`:
`gpu_spec`, when present and not empty, names the allowed models, separated by `|`).
"""

import csv
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cnbrain.domain.errors import Invalid
from cnbrain.placement.fragmentation import (
    MILLI,
    Cluster,
    NodeState,
    Packer,
    Policy,
    Task,
    workload_of,
)

MAX_NODES = 100_000
"""The most nodes a node list may hold."""

MAX_TASKS = 1_000_000
"""The most tasks a task list may hold."""

MAX_AMOUNT = 10**9
"""The most any field of a node or task may say (thousandths of cores, MiB, devices)."""

MAX_DEVICES = 64
"""The most devices a node may have, and a task ask for."""


class PackingInputError(Invalid):
    """A node or task list that cannot be read, naming the file, line and column."""


@dataclass(frozen=True, slots=True)
class PackingRun:
    """One policy on one list at one load (module docstring); devices in whole devices."""

    trace: str
    load: float
    policy: str
    arrived: int
    placed: int
    asked_devices: float
    placed_devices: float
    capacity_devices: float
    unallocated_devices: float
    stranded_devices: float
    partly_used_devices: float
    fragmentation_devices: float
    seconds: float

    @property
    def placed_share(self) -> float:
        """Placed tasks over arrived tasks."""
        return self.placed / self.arrived if self.arrived else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "placed_share": self.placed_share}


def run(
    nodes: Sequence[NodeState],
    tasks: Sequence[Task],
    *,
    trace: str,
    load: float,
    policy: Policy,
    seed: int = 0,
) -> PackingRun:
    """Draw tasks from `tasks` until they ask `load` times the devices of `nodes`, placing
    each by `policy` (module docstring)."""
    if not tasks:
        raise PackingInputError(f"{trace}: no task to draw")
    if not any(task.demand for task in tasks):
        raise PackingInputError(f"{trace}: no task asks for a device")
    started = time.perf_counter()
    cluster = Cluster(nodes)
    packer = Packer(cluster, policy, workload_of(tasks), seed=seed)
    draws = random.Random(seed)
    target = load * cluster.capacity
    asked = placed_milli = arrived = placed = 0
    while asked < target:
        task = tasks[draws.randrange(len(tasks))]
        arrived += 1
        asked += task.demand
        if packer.place(task) is not None:
            placed += 1
            placed_milli += task.demand
    unallocated = cluster.capacity - cluster.allocated
    return PackingRun(
        trace=trace,
        load=load,
        policy=policy,
        arrived=arrived,
        placed=placed,
        asked_devices=asked / MILLI,
        placed_devices=placed_milli / MILLI,
        capacity_devices=cluster.capacity / MILLI,
        unallocated_devices=unallocated / MILLI,
        stranded_devices=(unallocated - max(0, cluster.capacity - asked)) / MILLI,
        partly_used_devices=sum(
            free for state in cluster.states for free in state[3] if 0 < free < MILLI
        )
        / MILLI,
        fragmentation_devices=packer.fragmented(),
        seconds=time.perf_counter() - started,
    )


def read_nodes(path: Path) -> list[NodeState]:
    """The nodes of a node list (module docstring)."""
    nodes: list[NodeState] = []
    for line, row in _rows(path, ("cpu_milli", "memory_mib", "gpu", "model")):
        count = _int(path, line, row, "gpu", MAX_DEVICES)
        model = _text(path, line, row, "model")
        if count and not model:
            raise PackingInputError(f"{path}:{line}: model: a node with devices names its model")
        nodes.append(
            (
                _int(path, line, row, "cpu_milli", MAX_AMOUNT),
                _int(path, line, row, "memory_mib", MAX_AMOUNT),
                model,
                (MILLI,) * count,
            )
        )
        if len(nodes) > MAX_NODES:
            raise PackingInputError(f"{path}: more than {MAX_NODES} nodes")
    if not nodes:
        raise PackingInputError(f"{path}: no node")
    return nodes


def read_tasks(path: Path) -> list[Task]:
    """The tasks of a task list (module docstring)."""
    tasks: list[Task] = []
    for line, row in _rows(path, ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")):
        gpus = _int(path, line, row, "num_gpu", MAX_DEVICES)
        share = _int(path, line, row, "gpu_milli", MILLI)
        spec = _text(path, line, row, "gpu_spec") if "gpu_spec" in row else ""
        models = frozenset(spec.split("|")) if spec else None
        if gpus == 1 and share == 0:
            raise PackingInputError(f"{path}:{line}: gpu_milli: a one-device task asks 1..1000")
        tasks.append(
            Task(
                cpu_milli=_int(path, line, row, "cpu_milli", MAX_AMOUNT),
                mem_mib=_int(path, line, row, "memory_mib", MAX_AMOUNT),
                gpus=gpus,
                gpu_milli=share if gpus == 1 else (MILLI if gpus else 0),
                models=models if gpus else None,
            )
        )
        if len(tasks) > MAX_TASKS:
            raise PackingInputError(f"{path}: more than {MAX_TASKS} tasks")
    if not tasks:
        raise PackingInputError(f"{path}: no task")
    return tasks


def _rows(path: Path, needed: Sequence[str]) -> list[tuple[int, Mapping[str, str]]]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [name for name in needed if name not in (reader.fieldnames or ())]
            if missing:
                raise PackingInputError(f"{path}: no column {', '.join(missing)}")
            return [(i + 2, row) for i, row in enumerate(reader)]
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise PackingInputError(f"{path}: {error}") from None


def _int(path: Path, line: int, row: Mapping[str, str], name: str, most: int) -> int:
    text = (row.get(name) or "").strip()
    try:
        value = int(text)
    except ValueError:
        raise PackingInputError(f"{path}:{line}: {name}: not an integer: {text[:40]!r}") from None
    if not 0 <= value <= most:
        raise PackingInputError(f"{path}:{line}: {name}: must be within 0..{most}, not {value}")
    return value


def _text(path: Path, line: int, row: Mapping[str, str], name: str) -> str:
    text = (row.get(name) or "").strip()
    if len(text) > 200 or not all(c.isalnum() or c in "|-_." for c in text):
        raise PackingInputError(f"{path}:{line}: {name}: letters, digits, '|-_.' (200 at most)")
    return text
