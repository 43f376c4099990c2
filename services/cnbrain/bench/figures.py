"""Summary figures of a set of decisions, shared by the benchmarks."""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cnbrain.domain.decision import Decision, DecisionStatus
from cnbrain.ledger.memory import InMemoryLedger
from cnbrain.ledger.utilisation import link_utilisation, site_utilisation


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
