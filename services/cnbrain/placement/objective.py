"""The objective: cost, energy and carbon, latency and balance of a (request, site, path).

Every term is normalised by a reference that depends on the request and the map only, never
on the candidates, so objective values compare across strategies (Top-N against the exact
model, greedy against the solver):

- cost: (compute price x duration + bandwidth cost of the path) / the same request at the
  map's mean prices over a four-link path;
- energy: half kWh (power x PUE x duration) over kWh at the mean PUE, half carbon over carbon
  at the mean PUE and mean carbon intensity;
- latency: path latency over the request's latency bound (50 ms when it has none);
- balance: half the site's highest resource utilisation after placement, half the utilisation
  of the path's most loaded link after placement.
"""

import functools
from dataclasses import dataclass

import numpy as np

from cnbrain.domain.accelerators import MILLI
from cnbrain.netmap.arrays import FloatArray, IntArray, MapArrays
from cnbrain.placement.batch import RequestBatch

DEFAULT_LATENCY_REF_MS = 50.0
REFERENCE_PATH_LINKS = 4


@dataclass(frozen=True, slots=True, eq=False)
class References:
    """Per-request normalisers, each positive."""

    cost: FloatArray
    kwh: FloatArray
    carbon_kg: FloatArray
    latency_ms: FloatArray

    @classmethod
    def of(cls, batch: RequestBatch, arrays: MapArrays) -> "References":
        means = map_means(arrays)
        acc_price = (
            np.where(batch.acc_column >= 0, means.accelerator[np.maximum(batch.acc_column, 0)], 0.0)
            if len(means.accelerator)
            else np.zeros(len(batch))
        )
        cost = batch.duration_h * (
            batch.cpu_m / 1000 * means.cpu
            + batch.mem_mib / 1024 * means.memory
            + batch.storage_gib * means.storage
            + batch.acc_milli / MILLI * acc_price
            + batch.need_mbps / 1000 * means.link_cost * REFERENCE_PATH_LINKS
        )
        kwh = batch.power_w / 1000 * batch.duration_h * means.pue
        carbon = kwh * means.carbon / 1000
        latency = np.where(
            np.isfinite(batch.max_latency_ms), batch.max_latency_ms, DEFAULT_LATENCY_REF_MS
        )
        return cls(
            cost=_positive(cost),
            kwh=_positive(kwh),
            carbon_kg=_positive(carbon),
            latency_ms=latency,
        )


@dataclass(frozen=True, slots=True)
class MapMeans:
    """Mean unit prices, PUE and carbon intensity of a map's sites; accelerator prices are
    means over the sites that have each model."""

    cpu: float
    memory: float
    storage: float
    accelerator: FloatArray
    link_cost: float
    pue: float
    carbon: float


@functools.lru_cache(maxsize=8)
def map_means(arrays: MapArrays) -> MapMeans:
    accelerator = np.zeros(arrays.cap_acc.shape[1])
    for col in range(arrays.cap_acc.shape[1]):
        accelerator[col] = arrays.price_acc[arrays.cap_acc[:, col] > 0, col].mean()
    return MapMeans(
        cpu=float(arrays.price_cpu.mean()),
        memory=float(arrays.price_mem.mean()),
        storage=float(arrays.price_storage.mean()),
        accelerator=accelerator,
        link_cost=float(arrays.link_cost.mean()) if len(arrays.link_cost) else 0.0,
        pue=float(arrays.pue.mean()),
        carbon=float(arrays.carbon.mean()),
    )


def _positive(values: FloatArray) -> FloatArray:
    return np.where(values > 0, values, 1.0)


def compute_cost(batch: RequestBatch, arrays: MapArrays, r: IntArray, j: IntArray) -> FloatArray:
    """Compute price x duration of request rows `r` on sites `j` (broadcast together), CNY."""
    hourly = (
        batch.cpu_m[r] / 1000 * arrays.price_cpu[j]
        + batch.mem_mib[r] / 1024 * arrays.price_mem[j]
        + batch.storage_gib[r] * arrays.price_storage[j]
    )
    if arrays.price_acc.shape[1]:
        col = np.maximum(batch.acc_column[r], 0)
        acc = np.where(batch.acc_milli[r] > 0, arrays.price_acc[j, col], 0.0)
        hourly = hourly + np.where(batch.acc_milli[r] > 0, batch.acc_milli[r] / MILLI * acc, 0.0)
    return np.asarray(hourly * batch.duration_h[r], dtype=np.float64)


def energy(
    batch: RequestBatch, arrays: MapArrays, r: IntArray, j: IntArray
) -> tuple[FloatArray, FloatArray]:
    """(kWh, kg CO2) of request rows `r` on sites `j`, PUE included."""
    kwh = batch.power_w[r] / 1000 * batch.duration_h[r] * arrays.pue[j]
    return kwh, kwh * arrays.carbon[j] / 1000


def site_utilisation_after(
    batch: RequestBatch,
    arrays: MapArrays,
    free_cpu_m: IntArray,
    free_mem_mib: IntArray,
    free_storage_gib: IntArray,
    free_acc: IntArray,
    r: IntArray,
    j: IntArray,
) -> FloatArray:
    """Highest utilisation of any resource of site `j` once request `r` is placed there."""

    def share(cap: IntArray, free: IntArray, want: IntArray) -> FloatArray:
        used = (cap - free) + want
        return np.where(cap > 0, used / np.maximum(cap, 1), 0.0)

    util = np.maximum(
        share(arrays.cap_cpu_m[j], free_cpu_m[j], batch.cpu_m[r]),
        share(arrays.cap_mem_mib[j], free_mem_mib[j], batch.mem_mib[r]),
    )
    util = np.maximum(
        util, share(arrays.cap_storage_gib[j], free_storage_gib[j], batch.storage_gib[r])
    )
    if arrays.cap_acc.shape[1]:
        col = np.maximum(batch.acc_column[r], 0)
        acc = share(arrays.cap_acc[j, col], free_acc[j, col], batch.acc_milli[r])
        util = np.maximum(util, np.where(batch.acc_milli[r] > 0, acc, 0.0))
    return np.asarray(util, dtype=np.float64)
