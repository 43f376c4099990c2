"""Summary figures of a set of decisions, shared by the benchmarks."""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.ledger.memory import InMemoryLedger
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.arrays import FloatArray


@dataclass(frozen=True, slots=True)
class OutcomeFigures:
    accepted_share: float
    total_cost_cny: float
    total_energy_kwh: float
    total_carbon_kg: float
    mean_path_latency_ms: float
    site_utilisation_mean: float
    site_utilisation_cv: float
    max_link_utilisation: float


def outcome_figures(decisions: Sequence[Decision], ledger: InMemoryLedger) -> OutcomeFigures:
    """Totals over placed decisions, and how evenly the ledger's load is spread.

    Site utilisation is each site's highest resource share in use; its coefficient of
    variation (std / mean over all sites) measures balance: lower is more even."""
    placed = [d for d in decisions if d.status is DecisionStatus.PLACED and d.outcome is not None]
    outcomes = [d.outcome for d in placed if d.outcome is not None]
    snap = ledger.snapshot()
    site_util = site_utilisation(snap)
    link_util = link_utilisation(snap)
    mean = float(site_util.mean())
    return OutcomeFigures(
        accepted_share=len(placed) / len(decisions) if decisions else 0.0,
        total_cost_cny=sum(o.cost_cny for o in outcomes),
        total_energy_kwh=sum(o.energy_kwh for o in outcomes),
        total_carbon_kg=sum(o.carbon_kg for o in outcomes),
        mean_path_latency_ms=float(np.mean([o.latency_ms for o in outcomes])) if outcomes else 0.0,
        site_utilisation_mean=mean,
        site_utilisation_cv=float(site_util.std() / mean) if mean > 0 else 0.0,
        max_link_utilisation=float(link_util.max()) if len(link_util) else 0.0,
    )


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
