"""Column arrays of a map, in the integer units the ledger and the placement engine use.

Units: CPU in millicores, memory in MiB, storage in GiB, bandwidth in Mbps, accelerators in
thousandths of one (`MILLI` to a whole accelerator, so that fractions of one count), all
int64, so that reserving and releasing is exact. Accelerators are a (sites x models) matrix
whose columns follow `ComputeNetworkMap.accelerator_models`; `..._by_model` arrays hold the
same amounts transposed, for fast per-model rows.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from cnbrain.domain.accelerators import MILLI
from cnbrain.domain.enums import Interconnect, LinkLayer, SiteKind
from cnbrain.domain.request import ResourceDemand
from cnbrain.netmap.compute_map import ComputeNetworkMap

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

SITE_KIND_CODES: Mapping[SiteKind, int] = MappingProxyType({k: i for i, k in enumerate(SiteKind)})
ARCH_CODES: Mapping[str, int] = MappingProxyType({"x86_64": 0, "aarch64": 1})


def cores_to_millicores(cores: float) -> int:
    return math.ceil(round(cores * 1000, 6))


def millicores_to_cores(millicores: int) -> float:
    """The ledger's millicores as cores."""
    return millicores / 1000


def accelerators_to_milli(accelerators: int) -> int:
    """Whole accelerators in the ledger's unit, thousandths of one."""
    return accelerators * MILLI


def milli_to_accelerators(milli: int) -> float:
    """The ledger's thousandths of an accelerator as accelerators."""
    return milli / MILLI


def gib_to_mib(gib: float) -> int:
    return math.ceil(round(gib * 1024, 6))


def mib_to_gib(mib: int) -> float:
    """The ledger's MiB as GiB."""
    return mib / 1024


@dataclass(frozen=True, slots=True)
class DemandUnits:
    """What a request's whole gang holds, in the ledger's units: `accelerator_milli`
    thousandths of accelerators of `accelerator_model` (None and 0 without accelerators)."""

    cpu_m: int
    mem_mib: int
    storage_gib: int
    accelerator_model: str | None
    accelerator_milli: int


def demand_units(demand: ResourceDemand) -> DemandUnits:
    """`demand` in the ledger's units: each node's CPU and memory rounded up, times the nodes
    (so that every node of the gang gets its whole amount), and the job's storage."""
    accelerator = demand.accelerator
    return DemandUnits(
        cpu_m=demand.nodes * cores_to_millicores(demand.cpu),
        mem_mib=demand.nodes * gib_to_mib(demand.memory_gib),
        storage_gib=whole_gib(demand.storage_gib),
        accelerator_model=accelerator.model if accelerator else None,
        accelerator_milli=demand.total_accelerator_milli,
    )


def gbps_to_mbps(gbps: float) -> int:
    return math.ceil(round(gbps * 1000, 6))


def mbps_to_gbps(mbps: int) -> float:
    """The ledger's Mbps as Gbps."""
    return mbps / 1000


def whole_gib(gib: float) -> int:
    return math.ceil(round(gib, 6))


@dataclass(frozen=True, slots=True, eq=False)
class MapArrays:
    """Static per-site and per-link columns of one map. Built once per map; read-only."""

    map: ComputeNetworkMap
    accelerator_column: Mapping[str, int]
    link_index: Mapping[str, int]
    """Link id -> position in the `link_...` columns."""
    site_province: IntArray
    site_region: IntArray
    site_kind: IntArray
    site_arch: IntArray
    site_interconnect: IntArray
    cap_cpu_m: IntArray
    cap_mem_mib: IntArray
    cap_storage_gib: IntArray
    cap_acc: IntArray
    cap_acc_by_model: IntArray
    price_cpu: FloatArray
    price_mem: FloatArray
    price_storage: FloatArray
    price_acc: FloatArray
    pue: FloatArray
    carbon: FloatArray
    link_cap_mbps: IntArray
    link_latency_ms: FloatArray
    link_cost: FloatArray
    link_backbone: npt.NDArray[np.bool_]

    @property
    def n_sites(self) -> int:
        return len(self.map.sites)

    @classmethod
    def build(cls, cmap: ComputeNetworkMap) -> "MapArrays":
        sites, links = cmap.sites, cmap.links
        models = cmap.accelerator_models
        column = {m: i for i, m in enumerate(models)}
        province_idx = {code: i for i, code in enumerate(cmap.province_codes)}
        region_idx = {rid: i for i, rid in enumerate(cmap.regions)}
        n, m = len(sites), len(models)
        cap_acc = np.zeros((n, m), dtype=np.int64)
        price_acc = np.full((n, m), np.inf)
        for i, site in enumerate(sites):
            for model, count in site.capacity.accelerators.items():
                if count > 0:
                    cap_acc[i, column[model]] = accelerators_to_milli(count)
                    price_acc[i, column[model]] = site.prices.accelerator_hour[model]

        def ints(values: list[int]) -> IntArray:
            return np.asarray(values, dtype=np.int64)

        def floats(values: list[float]) -> FloatArray:
            return np.asarray(values, dtype=np.float64)

        return cls(
            map=cmap,
            accelerator_column=MappingProxyType(column),
            link_index=MappingProxyType({link.id: j for j, link in enumerate(links)}),
            site_province=ints([province_idx[s.province] for s in sites]),
            site_region=ints([region_idx[cmap.provinces[s.province].region] for s in sites]),
            site_kind=ints([SITE_KIND_CODES[s.kind] for s in sites]),
            site_arch=ints([ARCH_CODES[s.cpu_arch] for s in sites]),
            site_interconnect=ints([Interconnect(s.interconnect).rank for s in sites]),
            cap_cpu_m=ints([cores_to_millicores(s.capacity.cpu_cores) for s in sites]),
            cap_mem_mib=ints([gib_to_mib(s.capacity.memory_gib) for s in sites]),
            cap_storage_gib=ints([whole_gib(s.capacity.storage_gib) for s in sites]),
            cap_acc=cap_acc,
            cap_acc_by_model=np.ascontiguousarray(cap_acc.T),
            price_cpu=floats([s.prices.cpu_core_hour for s in sites]),
            price_mem=floats([s.prices.memory_gib_hour for s in sites]),
            price_storage=floats([s.prices.storage_gib_hour for s in sites]),
            price_acc=price_acc,
            pue=floats([s.pue for s in sites]),
            carbon=floats([s.carbon_g_per_kwh for s in sites]),
            link_cap_mbps=ints([gbps_to_mbps(link.bandwidth_gbps) for link in links]),
            link_latency_ms=floats([link.latency_ms for link in links]),
            link_cost=floats([link.cost_per_gbps_hour for link in links]),
            link_backbone=np.asarray(
                [link.layer is LinkLayer.BACKBONE for link in links], dtype=bool
            ),
        )
