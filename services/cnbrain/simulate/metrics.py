"""Figures of a simulation run: samples over time, and totals.

Definitions (every figure in `SimulationSummary` and `timeseries` follows them):

- **accepted share**: accepted / jobs (a job still waiting at a horizon counts as not
  accepted); over time, accepted / (accepted + rejected) among the jobs decided so far.
- **rejected by reason**: `never_fits` and `queue_timeout` (see `RejectReason`).
- **queueing delay**: the time an accepted job spent in the queue: start minus (scaled)
  arrival, less the time it ran before preemptions (0 for a job placed at arrival); mean,
  median (p50) and 95th percentile; p50 and p95 also per tenant, over the tenant's accepted
  jobs (tenants with none are left out), and per priority class (with classes on: each
  class's jobs, accepted jobs and accepted share, and the p50 and p95 over its accepted jobs).
- **accelerator-hours served**: over accepted jobs, accelerators times the hours from (last)
  start to departure or to the end of the run, whichever is first; in total and per tenant.
  **accelerator-hours lost**: accelerators times the hours jobs ran before being preempted
  (that work is done again from the start).
- **site utilisation**: per site, the highest share of CPU, memory, storage or any accelerator
  model in use (`cnbrain.ledger.utilisation.site_utilisation`); **link utilisation**: reserved
  bandwidth / capacity. Per sample: the mean over sites (links), the max, and the spread as the
  coefficient of variation (std / mean across sites or links; 0 when the mean is 0). Totals:
  means over samples, and the max over samples.
- **stranded accelerators** (`stranded_accelerators`): at a sample with at least one job
  waiting, the free accelerators of (site, model) pairs that no waiting job can use, because
  none of them asks for that model or none of those that do may use that site (its
  unresolvable constraints exclude it). With no job waiting nothing is stranded: free
  accelerators then serve no unmet demand. `idle_while_waiting` counts every free accelerator
  at samples where some job waits.
- **cost, energy, carbon**: sums over accepted jobs of their decision's outcome (whole
  duration, as the engine prices it); also per accepted job.
- **path latency**: mean and 95th percentile of accepted jobs' path latency; **SLO misses**:
  accepted jobs whose path latency exceeds their `max_latency_ms` (0 by construction: the
  engine never chooses such a path).
- **fairness**: Jain's index (sum x)^2 / (n sum x^2) over tenants of each tenant's accepted
  share among its decided jobs; 1 is perfectly even (and the value with one tenant).
  **fairness of accelerator-hours**: Jain's index over the tenants that asked for
  accelerators of the accelerator-hours each was served (not normalised by what it asked).
- **preemptions**: how many times a running job was preempted (a job may be preempted
  more than once); `preemption_modelled` is true for runs that may preempt (priority classes
  with `backfill` admission), else preemptions are 0 by construction.
"""

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from cnbrain.ledger.snapshot import Snapshot
from cnbrain.ledger.utilisation import link_utilisation, site_utilisation
from cnbrain.netmap.arrays import FloatArray, milli_to_accelerators
from cnbrain.simulate.eligibility import Eligibility
from cnbrain.simulate.records import JobStatus, RejectReason, Sample, SimulationResult


def stranded_accelerators(
    snapshot: Snapshot, eligibility: Eligibility, waiting: list[int]
) -> float:
    """Free accelerators that no waiting job can use (see the module docstring)."""
    if not waiting:
        return 0.0
    rows = np.asarray(waiting, dtype=np.int64)
    rows = rows[eligibility.acc_milli[rows] > 0]
    free = snapshot.free_acc
    wanted = np.zeros(free.shape, dtype=bool)
    columns = eligibility.acc_column[rows]
    for column in np.unique(columns[columns >= 0]).tolist():
        wanted[:, column] = eligibility.eligible[rows[columns == column]].any(axis=0)
    return milli_to_accelerators(int(free[~wanted].sum()))


def take_sample(
    now: float,
    snapshot: Snapshot,
    eligibility: Eligibility,
    *,
    waiting: list[int],
    accepted: int,
    rejected: int,
    running: int,
) -> Sample:
    """The state at `now`: utilisation from `snapshot`, stranding against the `waiting` rows."""
    a = snapshot.arrays
    free = milli_to_accelerators(int(snapshot.free_acc.sum()))
    return Sample(
        time_s=now,
        site_utilisation=site_utilisation(snapshot),
        link_utilisation=link_utilisation(snapshot),
        accelerators_used=milli_to_accelerators(int(a.cap_acc.sum())) - free,
        accelerators_free=free,
        stranded_accelerators=stranded_accelerators(snapshot, eligibility, waiting),
        accepted=accepted,
        rejected=rejected,
        waiting=len(waiting),
        running=running,
    )


@dataclass(frozen=True, slots=True)
class SimulationSummary:
    """Totals of one run (see the module docstring for every definition)."""

    policy: str
    load: float
    seed: int
    admission: str
    jobs: int
    accepted: int
    rejected: int
    waiting: int
    accepted_share: float
    accepted_accelerator_share: float
    """Accelerators of accepted jobs / accelerators asked by all jobs (1 when none asked)."""
    rejected_by_reason: dict[str, int]
    waited: int
    """Accepted jobs that waited in the queue first."""
    queue_delay_mean_s: float
    queue_delay_p50_s: float
    queue_delay_p95_s: float
    queue_delay_by_tenant: dict[str, dict[str, float]]
    """Per tenant with accepted jobs: {"p50_s": ..., "p95_s": ...}."""
    queue_delay_by_class: dict[str, dict[str, float]]
    """Per priority class with jobs (empty without classes): {"jobs", "accepted",
    "accepted_share", "p50_s", "p95_s"}."""
    accelerator_hours: float
    accelerator_hours_by_tenant: dict[str, float]
    """Per tenant that asked for accelerators."""
    accelerator_hours_lost: float
    """Run before preemptions, and lost."""
    fairness_accelerator_hours_jain: float
    preemptions: int
    preemption_modelled: bool
    """False: the run could not preempt, so `preemptions` is 0 by construction."""
    site_utilisation_mean: float
    site_utilisation_max: float
    site_utilisation_cv: float
    link_utilisation_mean: float
    link_utilisation_max: float
    link_utilisation_cv: float
    accelerator_utilisation_mean: float
    stranded_accelerators_mean: float
    stranded_accelerators_max: float
    idle_while_waiting_mean: float
    cost_cny: float
    energy_kwh: float
    carbon_kg: float
    cost_per_accepted_cny: float
    energy_per_accepted_kwh: float
    carbon_per_accepted_kg: float
    path_latency_mean_ms: float
    path_latency_p95_ms: float
    slo_misses: int
    fairness_jain: float
    tenants: int
    engine_calls: int
    end_s: float
    wall_s: float
    timeseries: dict[str, list[float]] = field(repr=False, default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _spread(values: FloatArray) -> float:
    mean = float(values.mean()) if len(values) else 0.0
    return float(values.std() / mean) if mean > 0 else 0.0


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else 0.0


def _p95(values: Sequence[float]) -> float:
    return float(np.percentile(values, 95)) if len(values) else 0.0


def _p50(values: Sequence[float]) -> float:
    return float(np.percentile(values, 50)) if len(values) else 0.0


def delays_by_tenant(result: SimulationResult) -> dict[str, dict[str, float]]:
    """Per tenant with accepted jobs: the p50 and p95 of their queueing delays."""
    delays: dict[str, list[float]] = {}
    for job in result.jobs:
        if job.status is JobStatus.ACCEPTED:
            delays.setdefault(job.tenant, []).append(job.wait_s or 0.0)
    return {
        tenant: {"p50_s": _p50(values), "p95_s": _p95(values)}
        for tenant, values in sorted(delays.items())
    }


def delays_by_class(result: SimulationResult) -> dict[str, dict[str, float]]:
    """Per priority class with jobs, in name order: its jobs, accepted jobs, accepted share
    (accepted / jobs) and the p50 and p95 of its accepted jobs' queueing delays (0 with
    none accepted). Empty for a run without classes."""
    jobs: Counter[str] = Counter()
    delays: dict[str, list[float]] = {}
    for job in result.jobs:
        if job.priority_class is None:
            continue
        jobs[job.priority_class] += 1
        if job.status is JobStatus.ACCEPTED:
            delays.setdefault(job.priority_class, []).append(job.wait_s or 0.0)
    out: dict[str, dict[str, float]] = {}
    for name, count in sorted(jobs.items()):
        values = delays.get(name, [])
        out[name] = {
            "jobs": float(count),
            "accepted": float(len(values)),
            "accepted_share": len(values) / count,
            "p50_s": _p50(values),
            "p95_s": _p95(values),
        }
    return out


def accelerator_hours_by_tenant(result: SimulationResult) -> dict[str, float]:
    """Per tenant that asked for accelerators: accelerator-hours served by the end of the
    run (see the module docstring)."""
    hours = {job.tenant: 0.0 for job in result.jobs if job.accelerators}
    for job in result.jobs:
        if job.status is JobStatus.ACCEPTED and job.accelerators and job.start_s is not None:
            end = result.end_s if job.end_s is None else min(job.end_s, result.end_s)
            hours[job.tenant] += job.accelerators * max(0.0, end - job.start_s) / 3600
    return dict(sorted(hours.items()))


def jain_index(shares: Sequence[float]) -> float:
    """Jain's fairness index of `shares`: 1 when all equal (or empty, or all zero)."""
    x = np.asarray(shares, dtype=np.float64)
    square = float((x**2).sum())
    return float(x.sum() ** 2 / (len(x) * square)) if len(x) and square > 0 else 1.0


def tenant_shares(result: SimulationResult) -> dict[str, float]:
    """Per tenant: accepted / decided (accepted or rejected) jobs; tenants with none decided
    are left out."""
    decided: Counter[str] = Counter()
    accepted: Counter[str] = Counter()
    for job in result.jobs:
        if job.status is not JobStatus.WAITING:
            decided[job.tenant] += 1
            accepted[job.tenant] += job.status is JobStatus.ACCEPTED
    return {t: accepted[t] / n for t, n in sorted(decided.items())}


def timeseries(result: SimulationResult) -> dict[str, list[float]]:
    """One list per figure, one value per sample, in time order."""
    s = result.samples
    total_acc = [x.accelerators_used + x.accelerators_free for x in s]
    return {
        "time_s": [x.time_s for x in s],
        "accepted_share": [
            x.accepted / (x.accepted + x.rejected) if x.accepted + x.rejected else 1.0 for x in s
        ],
        "rejected": [float(x.rejected) for x in s],
        "waiting": [float(x.waiting) for x in s],
        "running": [float(x.running) for x in s],
        "site_utilisation_mean": [float(x.site_utilisation.mean()) for x in s],
        "site_utilisation_max": [float(x.site_utilisation.max()) for x in s],
        "site_utilisation_cv": [_spread(x.site_utilisation) for x in s],
        "link_utilisation_mean": [float(x.link_utilisation.mean()) for x in s],
        "link_utilisation_max": [float(x.link_utilisation.max()) for x in s],
        "link_utilisation_cv": [_spread(x.link_utilisation) for x in s],
        "accelerator_utilisation": [
            x.accelerators_used / t if t else 0.0 for x, t in zip(s, total_acc, strict=True)
        ],
        "stranded_accelerators": [float(x.stranded_accelerators) for x in s],
        "idle_while_waiting": [float(x.accelerators_free if x.waiting else 0) for x in s],
    }


def summarise(result: SimulationResult) -> SimulationSummary:
    """The totals of `result`, with its time series."""
    jobs = result.jobs
    accepted = [j for j in jobs if j.status is JobStatus.ACCEPTED]
    rejected = Counter(
        j.reason.value for j in jobs if j.status is JobStatus.REJECTED and j.reason is not None
    )
    delays = [j.wait_s or 0.0 for j in accepted]
    latencies = [j.latency_ms for j in accepted if j.latency_ms is not None]
    asked = sum(j.accelerators for j in jobs)
    series = timeseries(result)
    shares = tenant_shares(result)
    served = accelerator_hours_by_tenant(result)
    n = len(accepted)
    cost = sum(j.cost_cny for j in accepted)
    energy = sum(j.energy_kwh for j in accepted)
    carbon = sum(j.carbon_kg for j in accepted)
    return SimulationSummary(
        policy=result.policy,
        load=result.load,
        seed=result.seed,
        admission=result.admission,
        jobs=len(jobs),
        accepted=n,
        rejected=sum(rejected.values()),
        waiting=result.count(JobStatus.WAITING),
        accepted_share=n / len(jobs) if jobs else 1.0,
        accepted_accelerator_share=sum(j.accelerators for j in accepted) / asked if asked else 1.0,
        rejected_by_reason={r.value: rejected.get(r.value, 0) for r in RejectReason},
        waited=sum(1 for d in delays if d > 0),
        queue_delay_mean_s=_mean(delays),
        queue_delay_p50_s=_p50(delays),
        queue_delay_p95_s=_p95(delays),
        queue_delay_by_tenant=delays_by_tenant(result),
        queue_delay_by_class=delays_by_class(result),
        accelerator_hours=sum(served.values()),
        accelerator_hours_by_tenant=served,
        accelerator_hours_lost=sum(j.lost_accelerator_hours for j in jobs),
        fairness_accelerator_hours_jain=jain_index(list(served.values())),
        preemptions=sum(j.preemptions for j in jobs),
        preemption_modelled=result.preemption_modelled,
        site_utilisation_mean=_mean(series["site_utilisation_mean"]),
        site_utilisation_max=max(series["site_utilisation_max"], default=0.0),
        site_utilisation_cv=_mean(series["site_utilisation_cv"]),
        link_utilisation_mean=_mean(series["link_utilisation_mean"]),
        link_utilisation_max=max(series["link_utilisation_max"], default=0.0),
        link_utilisation_cv=_mean(series["link_utilisation_cv"]),
        accelerator_utilisation_mean=_mean(series["accelerator_utilisation"]),
        stranded_accelerators_mean=_mean(series["stranded_accelerators"]),
        stranded_accelerators_max=max(
            (s.stranded_accelerators for s in result.samples), default=0.0
        ),
        idle_while_waiting_mean=_mean(series["idle_while_waiting"]),
        cost_cny=cost,
        energy_kwh=energy,
        carbon_kg=carbon,
        cost_per_accepted_cny=cost / n if n else 0.0,
        energy_per_accepted_kwh=energy / n if n else 0.0,
        carbon_per_accepted_kg=carbon / n if n else 0.0,
        path_latency_mean_ms=_mean(latencies),
        path_latency_p95_ms=_p95(latencies),
        slo_misses=sum(
            1
            for j in accepted
            if j.latency_ms is not None
            and j.max_latency_ms is not None
            and j.latency_ms > j.max_latency_ms
        ),
        fairness_jain=jain_index(list(shares.values())),
        tenants=len({j.tenant for j in jobs}),
        engine_calls=result.engine_calls,
        end_s=result.end_s,
        wall_s=result.wall_s,
        timeseries=series,
    )
