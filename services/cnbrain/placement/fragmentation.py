"""Tasks packed onto the nodes of one cluster, device by device, and the accelerators that
packing strands: fragmentation gradient descent (FGD: Weng et al., "Beware of
Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent",
USENIX ATC '23) and the usual baselines. Pure: no I/O.

A node has free CPU and memory and a list of devices (accelerators of one model), each with
its free share in thousandths (`MILLI` is a whole device). A task asks for CPU, memory and
either nothing of a device, a share of one device (`gpus == 1`, `gpu_milli < MILLI`), or
`gpus` whole devices; optionally only of some models.

**Fragmentation** (the paper's definition): against one task shape, a node's free device
capacity that the shape cannot use. When the shape cannot run on the node at all (too
little CPU, memory or device, another model) or asks for no device, every free share of the
node is fragmented; otherwise the free shares of the devices with less free than the shape
asks of one device (a whole one for a multi-device shape). Against a workload (shapes with
their popularity), the popularity-weighted sum. FGD places each task where the workload's
fragmentation grows least; a share of one device goes on the device where it grows least.

**Our FGD** (`fgd`) adds three things the paper's measure (`fgd-paper`) leaves out:
- **Scarcity.** A shape weighs its popularity over the square of its reach (`REACH_POWER`):
  the share of the cluster's devices on nodes that can run it at all. A shape only a few
  nodes can run (120 cores and eight devices, say) then keeps those nodes whole for itself.
- **Feeding.** A node's free devices that its free CPU and memory cannot feed, at the
  workload's CPU and memory per device share (`Feed`), count as fragmented too: a task that
  takes much CPU goes where CPU is plentiful, not where it would leave devices without any.
- **Copies.** A device's free share that a share of one device fits counts, for that shape,
  the remainder after as many copies of the shape as it holds (`copies`): 600 thousandths
  leave 130 that 470s cannot use, where the paper counts none.
"""

import random
from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

MILLI: Final = 1000
"""A whole device, in thousandths."""

Policy = Literal["fgd", "fgd-paper", "best-fit", "first-fit", "worst-fit", "random"]
POLICIES: Final[tuple[Policy, ...]] = (
    "fgd",
    "fgd-paper",
    "best-fit",
    "first-fit",
    "worst-fit",
    "random",
)
"""`fgd` is ours; `fgd-paper` is the paper's measure alone, to show what ours adds."""

SCORE_DIGITS: Final = 6
"""The FGD policies compare growths of their score rounded to this many digits (of a
thousandth of a device), so that float noise does not break what is a tie."""

REACH_POWER: Final = 2
"""The power of a shape's reach that its popularity is divided by (module docstring). With 1,
our FGD still refused one 120-core, eight-device task of the `multigpu50` list at load 0.9."""

BASELINES: Final[tuple[Policy, ...]] = ("best-fit", "first-fit", "worst-fit", "random")
"""The baselines: `best-fit` leaves the node with the least free device share (then CPU),
`worst-fit` the most, `first-fit` takes the first node in the list, `random` any node that
fits."""


@dataclass(frozen=True, slots=True)
class Task:
    """What a task asks of one node: `cpu_milli` (thousandths of a core), `mem_mib`, and
    `gpus` whole devices, or, with `gpus == 1` and `gpu_milli < MILLI`, that share of one;
    `models` the device models it may run on (None: any)."""

    cpu_milli: int
    mem_mib: int
    gpus: int = 0
    gpu_milli: int = 0
    models: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.mem_mib < 0 or self.gpus < 0:
            raise ValueError("a task asks for no negative amount")
        if self.gpus == 1 and not 0 < self.gpu_milli <= MILLI:
            raise ValueError(f"a share of one device is 1..{MILLI} thousandths")

    @property
    def fractional(self) -> bool:
        """Whether it asks for a share of one device, less than all of it."""
        return self.gpus == 1 and self.gpu_milli < MILLI

    @property
    def per_device(self) -> int:
        """What it asks of each device it uses, in thousandths (0: no device)."""
        if self.gpus == 0:
            return 0
        return self.gpu_milli if self.fractional else MILLI

    @property
    def demand(self) -> int:
        """All it asks of devices, in thousandths."""
        return self.per_device if self.fractional else self.gpus * MILLI


NodeState = tuple[int, int, str, tuple[int, ...]]
"""A node's free CPU (thousandths), free memory (MiB), device model and free share of each
device, sorted: nodes in the same state are interchangeable."""


def fits(state: NodeState, task: Task) -> bool:
    """Whether `task` can run on a node in `state`."""
    cpu, mem, model, devices = state
    if task.cpu_milli > cpu or task.mem_mib > mem:
        return False
    if task.gpus == 0:
        return True
    if task.models is not None and model not in task.models:
        return False
    if task.fractional:
        return bool(devices) and devices[-1] >= task.gpu_milli
    return sum(1 for free in devices if free == MILLI) >= task.gpus


def choices(state: NodeState, task: Task) -> list[NodeState]:
    """The states a node in `state` may be left in by `task` (one per distinct device it
    may take a share of; one for whole devices or none), empty when it does not fit."""
    if not fits(state, task):
        return []
    cpu, mem, model, devices = state
    cpu, mem = cpu - task.cpu_milli, mem - task.mem_mib
    if task.gpus == 0:
        return [(cpu, mem, model, devices)]
    if not task.fractional:
        full = devices.index(MILLI)
        left = devices[:full] + (0,) * task.gpus + devices[full + task.gpus :]
        return [(cpu, mem, model, tuple(sorted(left)))]
    out = []
    for i, free in enumerate(devices):
        if free >= task.gpu_milli and (i == 0 or devices[i - 1] != free):
            left = (*devices[:i], free - task.gpu_milli, *devices[i + 1 :])
            out.append((cpu, mem, model, tuple(sorted(left))))
    return out


Workload = Mapping[Task, float]
"""Task shapes with their popularity (weights summing to 1)."""


def workload_of(tasks: Iterable[Task]) -> dict[Task, float]:
    """The shapes of `tasks` with their share of them."""
    counts: dict[Task, int] = {}
    for task in tasks:
        counts[task] = counts.get(task, 0) + 1
    total = sum(counts.values())
    return {shape: n / total for shape, n in counts.items()}


def fragmentation(state: NodeState, workload: Workload, *, copies: bool = False) -> float:
    """The node's free device share (thousandths) that the workload's shapes cannot use,
    weighted by their popularity (module docstring); with `copies`, a device's free share
    that a shape fits counts its remainder after the copies of the shape it holds."""
    devices = state[3]
    free = sum(devices)
    if free == 0:
        return 0.0
    total = 0.0
    for shape, weight in workload.items():
        if shape.gpus == 0 or not fits(state, shape):
            total += weight * free
        else:
            need = shape.per_device
            total += weight * sum(f if f < need else f % need if copies else 0 for f in devices)
    return total


def scarcity_weighted(workload: Workload, nodes: Iterable[NodeState]) -> dict[Task, float]:
    """`workload` with each device shape's popularity divided by its reach to `REACH_POWER`, the
    share of the devices of `nodes` on nodes that could run it with all their devices free;
    weights summing to 1. A shape that asks for no device keeps its popularity; one that no
    node can run weighs nothing."""
    fresh: dict[NodeState, int] = {}
    for cpu, mem, model, devices in nodes:
        state = (cpu, mem, model, (MILLI,) * len(devices))
        fresh[state] = fresh.get(state, 0) + len(devices)
    total = sum(fresh.values())
    weighted: dict[Task, float] = {}
    for shape, weight in workload.items():
        if shape.gpus == 0:
            weighted[shape] = weight
            continue
        reach = sum(n for state, n in fresh.items() if fits(state, shape)) / (total or 1)
        weighted[shape] = weight / reach**REACH_POWER if reach else 0.0
    scale = sum(weighted.values())
    return {shape: w / scale for shape, w in weighted.items()} if scale else weighted


@dataclass(frozen=True, slots=True)
class Feed:
    """What a workload's device shapes ask of CPU and memory per device share: thousandths of
    a core and MiB per thousandth of a device, by popularity."""

    cpu: float
    mem: float

    @classmethod
    def of(cls, workload: Workload) -> "Feed":
        """The feed of `workload`; zero when no shape asks for a device, and then `unfed`
        counts nothing."""
        shares = sum(w * t.demand for t, w in workload.items() if t.gpus)
        if not shares:
            return cls(0.0, 0.0)
        return cls(
            cpu=sum(w * t.cpu_milli for t, w in workload.items() if t.gpus) / shares,
            mem=sum(w * t.mem_mib for t, w in workload.items() if t.gpus) / shares,
        )

    def unfed(self, state: NodeState) -> float:
        """The free device share (thousandths) of a node in `state` that its free CPU and
        memory cannot feed."""
        cpu, mem, _, devices = state
        free = sum(devices)
        fed = float(free)
        if self.cpu:
            fed = min(fed, cpu / self.cpu)
        if self.mem:
            fed = min(fed, mem / self.mem)
        return free - fed


class Shapes:
    """A workload as arrays over its shapes: the fragmentation of a state in a few array
    operations, equal to the module's `fragmentation` (with `copies` as given)."""

    def __init__(self, workload: Workload, *, copies: bool = False) -> None:
        self.copies = copies
        shapes = list(workload)
        self.weights = np.array([workload[t] for t in shapes], dtype=np.float64)
        self.cpu = np.array([t.cpu_milli for t in shapes], dtype=np.int64)
        self.mem = np.array([t.mem_mib for t in shapes], dtype=np.int64)
        self.gpus = np.array([t.gpus for t in shapes], dtype=np.int64)
        self.need = np.array([t.per_device for t in shapes], dtype=np.int64)
        self._divisor = np.maximum(self.need, 1)
        self.fractional = np.array([t.fractional for t in shapes], dtype=bool)
        self.uses_devices = self.gpus > 0
        self._models = [t.models for t in shapes]
        self._allowed: dict[str, np.ndarray] = {}

    def allowed(self, model: str) -> np.ndarray:
        """Which shapes may run on devices of `model`."""
        found = self._allowed.get(model)
        if found is None:
            found = np.array([m is None or model in m for m in self._models], dtype=bool)
            self._allowed[model] = found
        return found

    def fragmentation(self, state: NodeState) -> float:
        """`fragmentation(state, workload, copies=copies)` (the module's function; equal to
        it)."""
        cpu, mem, model, devices = state
        if not devices:
            return 0.0
        free_by_device = np.array(devices, dtype=np.int64)
        free = int(free_by_device.sum())
        if free == 0:
            return 0.0
        whole = int(np.count_nonzero(free_by_device == MILLI))
        device_fit = np.where(self.fractional, devices[-1] >= self.need, whole >= self.gpus)
        fit = (self.cpu <= cpu) & (self.mem <= mem) & self.allowed(model) & device_fit
        if self.copies:
            unusable = (free_by_device[None, :] % self._divisor[:, None]).sum(axis=1)
        else:
            below = np.concatenate(([0], np.cumsum(free_by_device)))
            unusable = below[np.searchsorted(free_by_device, self.need, side="left")]
        return float(self.weights @ np.where(self.uses_devices & fit, unusable, free))


class Cluster:
    """The nodes' states, grouped: nodes in one state are one bucket, taken lowest index
    first, so each decision looks at every distinct state once."""

    def __init__(self, nodes: Sequence[NodeState]) -> None:
        self.states: list[NodeState] = [_sorted(node) for node in nodes]
        self.buckets: dict[NodeState, list[int]] = {}
        for i, state in enumerate(self.states):
            self.buckets.setdefault(state, []).append(i)
        self.capacity = sum(sum(state[3]) for state in self.states)
        self.allocated = 0

    def move(self, node: int, to: NodeState, demand: int) -> None:
        """Leave `node` in state `to`, having taken `demand` thousandths of its devices."""
        bucket = self.buckets[self.states[node]]
        del bucket[bisect_left(bucket, node)]
        if not bucket:
            del self.buckets[self.states[node]]
        insort(self.buckets.setdefault(to, []), node)
        self.states[node] = to
        self.allocated += demand


def _sorted(state: NodeState) -> NodeState:
    cpu, mem, model, devices = state
    return (cpu, mem, model, tuple(sorted(devices)))


class Packer:
    """Places tasks one by one on `cluster` by `policy`, the FGD policies measuring against
    `workload` (ours with scarcity over the nodes as it finds them, feeding and copies:
    module docstring). `seed` drives `random`."""

    def __init__(
        self, cluster: Cluster, policy: Policy, workload: Workload, *, seed: int = 0
    ) -> None:
        self.cluster = cluster
        self.policy = policy
        self.workload = workload
        self._random = random.Random(seed)
        self._shapes = Shapes(workload)
        self._fragmentation: dict[NodeState, float] = {}
        self._choices: dict[tuple[NodeState, Task], list[NodeState]] = {}
        self._scored = (
            Shapes(scarcity_weighted(workload, cluster.states), copies=True)
            if policy == "fgd"
            else None
        )
        self._feed = Feed.of(workload)
        self._score: dict[NodeState, float] = {}

    def fragmentation_of(self, state: NodeState) -> float:
        """`fragmentation(state, workload)`, remembered by state."""
        found = self._fragmentation.get(state)
        if found is None:
            found = self._fragmentation[state] = self._shapes.fragmentation(state)
        return found

    def score_of(self, state: NodeState) -> float:
        """What the FGD policy minimises the growth of: the paper's fragmentation for
        `fgd-paper`; for `fgd`, fragmentation with copies against the scarcity-weighted
        workload plus the devices left unfed (module docstring). Remembered by state."""
        if self._scored is None:
            return self.fragmentation_of(state)
        found = self._score.get(state)
        if found is None:
            found = self._scored.fragmentation(state) + self._feed.unfed(state)
            self._score[state] = found
        return found

    def _choices_of(self, state: NodeState, task: Task) -> list[NodeState]:
        found = self._choices.get((state, task))
        if found is None:
            found = self._choices[(state, task)] = choices(state, task)
        return found

    def place(self, task: Task) -> int | None:
        """Place `task`: the node it went to, or None when no node fits (nothing changes)."""
        options = [
            (state, after)
            for state in self.cluster.buckets
            for after in self._choices_of(state, task)
        ]
        if not options:
            return None
        state, after = self._choose(options)
        node = self.cluster.buckets[state][0]
        if self.policy == "random":
            node = self._random.choice(self.cluster.buckets[state])
        self.cluster.move(node, after, task.demand)
        return node

    def _choose(self, options: list[tuple[NodeState, NodeState]]) -> tuple[NodeState, NodeState]:
        buckets = self.cluster.buckets
        if self.policy == "first-fit":
            return min(options, key=lambda o: (buckets[o[0]][0], _left(o[1])))
        if self.policy == "best-fit":
            return min(options, key=lambda o: (_left(o[1]), buckets[o[0]][0]))
        if self.policy == "worst-fit":
            return min(options, key=lambda o: (_negated(_left(o[1])), buckets[o[0]][0]))
        if self.policy == "random":
            weights = [len(buckets[state]) for state, _ in options]
            return self._random.choices(options, weights=weights)[0]
        return min(
            options,
            key=lambda o: (
                round(self.score_of(o[1]) - self.score_of(o[0]), SCORE_DIGITS),
                _left(o[1]),
                buckets[o[0]][0],
            ),
        )

    def fragmented(self) -> float:
        """The fragmentation of the whole cluster against the workload, in devices."""
        return (
            sum(
                self.fragmentation_of(state) * len(nodes)
                for state, nodes in self.cluster.buckets.items()
            )
            / MILLI
        )


def _left(state: NodeState) -> tuple[int, int]:
    """What a node in `state` has left: free device share, then free CPU."""
    return sum(state[3]), state[0]


def _negated(left: tuple[int, int]) -> tuple[int, int]:
    return -left[0], -left[1]
