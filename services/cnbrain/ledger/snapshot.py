"""A consistent, read-only view of free capacity taken at the start of a placement cycle."""

from dataclasses import dataclass

import numpy as np

from cnbrain.netmap.arrays import IntArray, MapArrays


@dataclass(frozen=True, slots=True, eq=False)
class Snapshot:
    """Free capacity per site and residual bandwidth per link at ledger `version`.

    The arrays are read-only; a cycle that needs to track its own tentative use copies them.
    """

    arrays: MapArrays
    version: int
    free_cpu_m: IntArray
    free_mem_mib: IntArray
    free_storage_gib: IntArray
    free_acc: IntArray
    free_acc_by_model: IntArray
    residual_mbps: IntArray

    @classmethod
    def of(
        cls,
        arrays: MapArrays,
        *,
        version: int,
        used_cpu_m: IntArray,
        used_mem_mib: IntArray,
        used_storage_gib: IntArray,
        used_acc: IntArray,
        used_mbps: IntArray,
    ) -> "Snapshot":
        def frozen(values: IntArray) -> IntArray:
            values.setflags(write=False)
            return values

        return cls(
            arrays=arrays,
            version=version,
            free_cpu_m=frozen(arrays.cap_cpu_m - used_cpu_m),
            free_mem_mib=frozen(arrays.cap_mem_mib - used_mem_mib),
            free_storage_gib=frozen(arrays.cap_storage_gib - used_storage_gib),
            free_acc=frozen(arrays.cap_acc - used_acc),
            free_acc_by_model=frozen(np.ascontiguousarray((arrays.cap_acc - used_acc).T)),
            residual_mbps=frozen(arrays.link_cap_mbps - used_mbps),
        )

    @classmethod
    def empty(cls, arrays: MapArrays) -> "Snapshot":
        """A snapshot of a map with nothing reserved."""
        zeros = np.zeros_like
        return cls.of(
            arrays,
            version=0,
            used_cpu_m=zeros(arrays.cap_cpu_m),
            used_mem_mib=zeros(arrays.cap_mem_mib),
            used_storage_gib=zeros(arrays.cap_storage_gib),
            used_acc=zeros(arrays.cap_acc),
            used_mbps=zeros(arrays.link_cap_mbps),
        )
