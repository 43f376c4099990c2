"""How much of each site and link a snapshot shows in use, as shares of capacity."""

import numpy as np

from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import FloatArray


def site_utilisation(snap: Snapshot) -> FloatArray:
    """Per site: the highest share of its CPU, memory, storage or any accelerator model in use
    (0 for a resource the site does not have)."""
    a = snap.arrays
    shares = []
    for cap, free in (
        (a.cap_cpu_m, snap.free_cpu_m),
        (a.cap_mem_mib, snap.free_mem_mib),
        (a.cap_storage_gib, snap.free_storage_gib),
    ):
        shares.append(np.where(cap > 0, (cap - free) / np.maximum(cap, 1), 0.0))
    if a.cap_acc.shape[1]:
        acc = np.where(a.cap_acc > 0, (a.cap_acc - snap.free_acc) / np.maximum(a.cap_acc, 1), 0.0)
        shares.append(acc.max(axis=1))
    return np.asarray(np.max(np.stack(shares), axis=0), dtype=np.float64)


def link_utilisation(snap: Snapshot) -> FloatArray:
    """Per link: reserved bandwidth / capacity."""
    a = snap.arrays
    return np.asarray((a.link_cap_mbps - snap.residual_mbps) / a.link_cap_mbps, dtype=np.float64)
