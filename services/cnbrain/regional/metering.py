"""Usage records from a scheduler's own accounting, priced at the site's prices.

For one attempt: the start, end and elapsed time, CPUs, memory and GPUs are the accounting's
(`JobAccounting`); hours are elapsed hours times each resource. A request for a fraction of
one accelerator is metered at its share of one, whatever slice of a GPU the site gave it.
The compute cost is those hours at the site's `prices` (CPU core-hours, memory GiB-hours,
accelerator-hours of the request's model); the network cost is the bandwidth the decision
reserved on its path, for the same elapsed time, at each link's `cost_per_gbps_hour`. A
simulator's records are marked `simulated`; the dispatcher maps their times to the
machine's clock first (`cnbrain.regional.simulated_time`), their elapsed time stays simulated.
"""

from collections.abc import Mapping

from cnbrain.domain.decision import Decision
from cnbrain.domain.errors import Conflict
from cnbrain.domain.network import Link
from cnbrain.domain.request import PlacementRequest
from cnbrain.domain.site import Site
from cnbrain.execution import JobAccounting
from cnbrain.netmap.arrays import milli_to_accelerators
from cnbrain.storage.usage import NewUsage


class NotMeterableError(Conflict, ValueError):
    """The accounting record cannot give a usage record (the job never started, or has not
    ended); the message says which."""


def usage_of(
    *,
    request: PlacementRequest,
    attempt: int,
    site: Site,
    decision: Decision | None,
    links: Mapping[str, Link],
    accounting: JobAccounting,
    simulated: bool,
) -> NewUsage:
    """The usage record of `request`'s attempt `attempt` on `site` from `accounting`.

    `links` are the map's links by id (for the path's prices; links it does not know cost
    nothing). Raises NotMeterableError when the job never started or has not ended.
    """
    if accounting.started_at is None:
        raise NotMeterableError(f"job {accounting.job_id} never started: nothing to meter")
    if accounting.ended_at is None:
        raise NotMeterableError(f"job {accounting.job_id} has not ended in its accounting yet")
    hours = accounting.elapsed_s / 3600
    memory_gib = accounting.memory_mib / 1024
    accelerator = request.resources.accelerator
    fraction = accelerator.fraction_milli if accelerator is not None else None
    held = accounting.gpus > 0 or fraction is not None
    model = accelerator.model if accelerator is not None and held else None
    prices = site.prices
    cpu_core_hours = accounting.cpus * hours
    memory_gib_hours = memory_gib * hours
    share = accounting.gpus if fraction is None else milli_to_accelerators(fraction)
    accelerator_hours = share * hours
    compute = cpu_core_hours * prices.cpu_core_hour + memory_gib_hours * prices.memory_gib_hour
    if model is not None:
        compute += accelerator_hours * prices.accelerator_hour.get(model, 0.0)
    path = decision.path if decision is not None else None
    bandwidth = path.bandwidth_gbps if path is not None else 0.0
    hops = [hop.link for segment in path.segments for hop in segment.hops] if path else []
    per_gbps_hour = sum(links[hop].cost_per_gbps_hour for hop in hops if hop in links)
    return NewUsage(
        tenant_id=request.tenant,
        request_id=request.id,
        attempt=attempt,
        site_id=site.id,
        backend_job_id=accounting.job_id,
        started_at=accounting.started_at,
        ended_at=accounting.ended_at,
        elapsed_s=accounting.elapsed_s,
        cpus=accounting.cpus,
        memory_mib=accounting.memory_mib,
        gpus=accounting.gpus,
        accelerator_model=model,
        bandwidth_gbps=bandwidth,
        cpu_core_hours=cpu_core_hours,
        memory_gib_hours=memory_gib_hours,
        accelerator_hours=accelerator_hours,
        compute_cost_cny=compute,
        network_cost_cny=bandwidth * hours * per_gbps_hour,
        source=accounting.source,
        simulated=simulated,
    )
