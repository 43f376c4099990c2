"""What a site's scheduler reports free on the site's node pools (`PoolSummary`), from its
node list: the part of the compact site knowledge that sites report, beside what the brain's
own reservations take (`cnbrain.ledger.nodes`)."""

from collections.abc import Mapping, Sequence

from cnbrain.execution.jobs import NodeReport
from cnbrain.ledger.nodes import Pool, PoolSummary


def reported_summaries(
    pools: Sequence[Pool], nodes: Sequence[NodeReport], gpu_types: Mapping[str, str]
) -> tuple[PoolSummary, ...]:
    """What `nodes` (the scheduler's node list) leave free on each of `pools` (a site's, in
    order). Each node goes to the first pool with room left whose nodes it matches: in an
    accelerator pool, it has exactly the pool's number of GPUs of the type the site names the
    pool's model by (`gpu_types`: model to type; the model's own name when absent); in a CPU
    pool, no GPU and at least the pool's cores. Its free units are its GPUs of that type that
    no job holds (its cores no job holds, in a CPU pool); none when it takes no new job
    (`NodeReport.takes_jobs`) or jobs hold all its CPUs or memory. A pool's nodes that no
    reported node matches count as none free: a node its scheduler does not show runs
    nothing."""
    free: list[list[int]] = [[] for _ in pools]
    for node in nodes:
        for i, pool in enumerate(pools):
            if len(free[i]) < pool.count and _matches(node, pool, gpu_types):
                free[i].append(_free_units(node, pool, gpu_types) if _usable(node) else 0)
                break
    return tuple(
        PoolSummary.of_free_units(pool, units) for pool, units in zip(pools, free, strict=True)
    )


def _type_of(pool: Pool, gpu_types: Mapping[str, str]) -> str:
    model = pool.model or ""
    return gpu_types.get(model, model)


def _matches(node: NodeReport, pool: Pool, gpu_types: Mapping[str, str]) -> bool:
    if pool.model is None:
        return not any(node.gpus.values()) and node.cpus * 1000 >= pool.cpu_m
    return node.gpus.get(_type_of(pool, gpu_types), 0) == pool.devices


def _usable(node: NodeReport) -> bool:
    return (
        node.takes_jobs
        and node.cpus_allocated < node.cpus
        and node.memory_allocated_mib < node.memory_mib
    )


def _free_units(node: NodeReport, pool: Pool, gpu_types: Mapping[str, str]) -> int:
    if pool.model is None:
        return node.cpus - node.cpus_allocated
    return node.free_gpus.get(_type_of(pool, gpu_types), 0)
