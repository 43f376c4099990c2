"""Requests as column arrays, so that filters and scores run on whole batches at once."""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from cnbrain.domain.accelerators import ACCELERATOR_POWER_W, CPU_CORE_POWER_W, MEMORY_GIB_POWER_W
from cnbrain.domain.request import PlacementRequest
from cnbrain.ledger.nodes import Gang, gang_of
from cnbrain.netmap.arrays import (
    ARCH_CODES,
    FloatArray,
    IntArray,
    MapArrays,
    demand_units,
    gbps_to_mbps,
)
from cnbrain.placement.request_check import check_request
from cnbrain.placement.weights import WeightMatrix

ABSENT_MODEL = -2
"""Accelerator column of a request for a model that no site of the map has."""


@dataclass(frozen=True, slots=True, eq=False)
class RequestBatch:
    """B checked requests as columns. `acc_column` is -1 for no accelerator and ABSENT_MODEL
    for a model the map lacks; `arch` is -1 for any architecture; `max_latency_ms` is inf
    when unbounded; `weights` is (B, 4) in OBJECTIVES order, already times the weight matrix.
    `gangs` are the requests' nodes and each node's amounts, for sites with node pools;
    `gang_kinds` the distinct ones, and `gang_kind` each request's index among them."""

    requests: tuple[PlacementRequest, ...]
    gangs: tuple[Gang, ...]
    gang_kinds: tuple[Gang, ...]
    gang_kind: IntArray
    access_nodes: tuple[str, ...]
    cpu_m: IntArray
    mem_mib: IntArray
    storage_gib: IntArray
    acc_column: IntArray
    acc_milli: IntArray
    need_mbps: IntArray
    max_latency_ms: FloatArray
    arch: IntArray
    interconnect_rank: IntArray
    source_province: IntArray
    national_optimum: npt.NDArray[np.bool_]
    allowed_province: npt.NDArray[np.bool_]
    duration_h: FloatArray
    power_w: FloatArray
    weights: FloatArray
    priority: IntArray

    def __len__(self) -> int:
        return len(self.requests)

    @classmethod
    def build(
        cls, requests: Sequence[PlacementRequest], arrays: MapArrays, matrix: WeightMatrix
    ) -> "RequestBatch":
        """Check every request against the map (RequestError on the first bad one) and build."""
        cmap = arrays.map
        for request in requests:
            check_request(request, cmap)
        province_idx = {code: i for i, code in enumerate(cmap.province_codes)}
        allowed = _allowed_provinces(requests, arrays, province_idx)
        acc_column, acc_milli = _accelerator_columns(requests, arrays)
        power = _power_w(requests)
        units = [demand_units(r.resources) for r in requests]
        gangs = tuple(gang_of(r.resources) for r in requests)
        kinds = {g: i for i, g in enumerate(dict.fromkeys(gangs))}
        n = len(requests)
        return cls(
            requests=tuple(requests),
            gangs=gangs,
            gang_kinds=tuple(kinds),
            gang_kind=_ints([kinds[g] for g in gangs], n),
            access_nodes=tuple(
                r.access_node or cmap.provinces[r.source_province].access_nodes[0] for r in requests
            ),
            cpu_m=_ints([u.cpu_m for u in units], n),
            mem_mib=_ints([u.mem_mib for u in units], n),
            storage_gib=_ints([u.storage_gib for u in units], n),
            acc_column=_ints(acc_column, n),
            acc_milli=_ints(acc_milli, n),
            need_mbps=_ints([gbps_to_mbps(r.constraints.min_bandwidth_gbps) for r in requests], n),
            max_latency_ms=_floats([r.constraints.max_latency_ms or math.inf for r in requests], n),
            arch=_ints(
                [
                    ARCH_CODES[r.constraints.cpu_arch] if r.constraints.cpu_arch else -1
                    for r in requests
                ],
                n,
            ),
            interconnect_rank=_ints(
                [
                    r.constraints.interconnect.rank if r.constraints.interconnect else 0
                    for r in requests
                ],
                n,
            ),
            source_province=_ints([province_idx[r.source_province] for r in requests], n),
            national_optimum=np.asarray([r.national_optimum for r in requests], dtype=bool).reshape(
                n
            ),
            allowed_province=allowed,
            duration_h=_floats([r.duration_hours for r in requests], n),
            power_w=_floats(power, n),
            weights=np.asarray(
                [matrix.effective(r.workload_class, r.objective) for r in requests],
                dtype=np.float64,
            ).reshape(n, 4),
            priority=_ints([r.priority for r in requests], n),
        )


def _ints(values: Sequence[int], n: int) -> IntArray:
    """`values` (n of them) as an int64 column."""
    return np.asarray(values, dtype=np.int64).reshape(n)


def _floats(values: Sequence[float], n: int) -> FloatArray:
    """`values` (n of them) as a float64 column."""
    return np.asarray(values, dtype=np.float64).reshape(n)


def _accelerator_columns(
    requests: Sequence[PlacementRequest], arrays: MapArrays
) -> tuple[list[int], list[int]]:
    """Per request, the map's accelerator column of its model (-1 for no accelerator,
    ABSENT_MODEL for a model the map lacks) and how many thousandths of accelerators it asks
    for (0 for none)."""
    acc_column: list[int] = []
    acc_milli: list[int] = []
    for r in requests:
        acc = r.resources.accelerator
        if acc is None:
            acc_column.append(-1)
            acc_milli.append(0)
        else:
            acc_column.append(arrays.accelerator_column.get(acc.model, ABSENT_MODEL))
            acc_milli.append(r.resources.total_accelerator_milli)
    return acc_column, acc_milli


def _power_w(requests: Sequence[PlacementRequest]) -> list[float]:
    """Per request, the power its CPU cores, memory and accelerators draw, in W."""
    power: list[float] = []
    for r in requests:
        want = r.resources
        acc = want.accelerator
        power.append(
            want.total_cpu * CPU_CORE_POWER_W
            + want.total_memory_gib * MEMORY_GIB_POWER_W
            + (want.total_accelerators * ACCELERATOR_POWER_W[acc.model] if acc else 0.0)
        )
    return power


def _allowed_provinces(
    requests: Sequence[PlacementRequest], arrays: MapArrays, province_idx: dict[str, int]
) -> npt.NDArray[np.bool_]:
    """(B, P): may request b use a site of province p (in `province_idx` order)? All are
    allowed but those outside a request's `regions_allowed` (when it names any) and those
    in its `regions_denied`."""
    cmap = arrays.map
    regions = list(cmap.regions)
    region_of_province = np.asarray(
        [regions.index(cmap.provinces[c].region) for c in cmap.province_codes], dtype=np.int64
    )
    allowed = np.ones((len(requests), len(cmap.province_codes)), dtype=bool)
    for i, r in enumerate(requests):
        c = r.constraints
        if c.regions_allowed:
            allowed[i] = _named(c.regions_allowed, province_idx, regions, region_of_province)
        if c.regions_denied:
            allowed[i] &= ~_named(c.regions_denied, province_idx, regions, region_of_province)
    return allowed


def _named(
    names: Sequence[str],
    province_idx: dict[str, int],
    regions: list[str],
    region_of_province: IntArray,
) -> npt.NDArray[np.bool_]:
    """Provinces covered by a list of province codes and region ids."""
    mask = np.zeros(len(region_of_province), dtype=bool)
    for name in names:
        if name in province_idx:
            mask[province_idx[name]] = True
        else:
            mask |= region_of_province == regions.index(name)
    return mask
