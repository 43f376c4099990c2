"""`cnbrain bench placement`: throughput, latency and outcome of each policy on one map.

For every policy, on a fresh ledger each time:
- single: the requests placed one by one (each its own cycle); decisions/s and the p50/p99
  latency of one decision;
- batch: the same requests placed as one batch; decisions/s.
Outcome figures (acceptance, cost, energy, latency, balance) are those of the batch run.
Before timing, every engine routes a separate warm-up set once as quotes (nothing reserved),
so path caches are filled as in a running brain, and the objects alive then are frozen out of
the garbage collector's scans (`gc.freeze`), as a long-running brain does after start-up; the
cold first decision is reported apart.
On maps of at most `EXACT_MAX_SITES` sites, the gap of each policy's objective to the exact
model is measured request by request (see `cnbrain.bench.quality`).
"""

import gc
import time
from dataclasses import asdict, dataclass

import numpy as np

from cnbrain.bench.figures import OutcomeFigures, outcome_figures
from cnbrain.bench.quality import GapFigures, objective_gaps
from cnbrain.bench.workload import random_requests
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.placement.engine import PlacementEngine

EXACT_MAX_SITES = 200
WARM_UP_REQUESTS = 500


@dataclass(frozen=True, slots=True)
class PolicyFigures:
    policy: str
    requests: int
    cold_first_decision_ms: float
    single_decisions_per_s: float
    single_p50_ms: float
    single_p99_ms: float
    batch_decisions_per_s: float
    batch: OutcomeFigures
    gap_to_exact: GapFigures | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def bench_policy(
    cmap: ComputeNetworkMap, policy: str, *, requests: int, seed: int
) -> PolicyFigures:
    work = random_requests(cmap, count=requests, seed=seed)
    warm = random_requests(cmap, count=WARM_UP_REQUESTS, seed=seed + 1_000_003)

    single = PlacementEngine(cmap)
    start = time.perf_counter()
    single.place(warm[0], policy=policy, reserve=False)
    cold_ms = (time.perf_counter() - start) * 1000
    single.place_batch(warm, policy=policy, reserve=False)
    _freeze_garbage_collector()
    latencies = []
    start = time.perf_counter()
    for request in work:
        t0 = time.perf_counter()
        single.place(request, policy=policy)
        latencies.append((time.perf_counter() - t0) * 1000)
    single_rate = len(work) / (time.perf_counter() - start)

    batch = PlacementEngine(cmap)
    batch.place_batch(warm, policy=policy, reserve=False)
    _freeze_garbage_collector()
    start = time.perf_counter()
    decisions = batch.place_batch(work, policy=policy)
    batch_rate = len(work) / (time.perf_counter() - start)
    gc.unfreeze()

    gap = None
    if len(cmap.sites) <= EXACT_MAX_SITES and policy != "exact":
        gap = objective_gaps(cmap, policy, requests=work)
    return PolicyFigures(
        policy=policy,
        requests=len(work),
        cold_first_decision_ms=cold_ms,
        single_decisions_per_s=single_rate,
        single_p50_ms=float(np.percentile(latencies, 50)),
        single_p99_ms=float(np.percentile(latencies, 99)),
        batch_decisions_per_s=batch_rate,
        batch=outcome_figures(decisions, batch.ledger),
        gap_to_exact=gap,
    )


def _freeze_garbage_collector() -> None:
    gc.collect()
    gc.freeze()


def format_table(figures: list[PolicyFigures]) -> str:
    """A plain-text table, one row per policy."""
    head = (
        f"{'policy':<16}{'batch/s':>9}{'single/s':>10}{'p50 ms':>8}{'p99 ms':>8}{'accept':>8}"
        f"{'cost CNY':>13}{'energy kWh':>12}{'lat ms':>8}{'util cv':>8}{'link max':>9}"
        f"{'gap<=1%':>9}"
    )
    rows = [head, "-" * len(head)]
    for f in figures:
        b = f.batch
        gap = f"{f.gap_to_exact.within_1pct_share:.1%}" if f.gap_to_exact else "-"
        rows.append(
            f"{f.policy:<16}{f.batch_decisions_per_s:>9.0f}{f.single_decisions_per_s:>10.0f}"
            f"{f.single_p50_ms:>8.2f}{f.single_p99_ms:>8.2f}{b.accepted_share:>8.1%}"
            f"{b.total_cost_cny:>13,.0f}{b.total_energy_kwh:>12,.0f}{b.mean_path_latency_ms:>8.2f}"
            f"{b.site_utilisation_cv:>8.2f}{b.max_link_utilisation:>9.2f}{gap:>9}"
        )
    return "\n".join(rows)
