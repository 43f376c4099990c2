"""What a site's scheduler reports free on the site's node pools (`PoolReport`), from its
node list: the part of the compact site knowledge that sites report, beside what the brain's
own reservations take (`cnbrain.ledger.nodes`)."""

from collections.abc import Mapping, Sequence

from cnbrain.domain.accelerators import MILLI
from cnbrain.execution.jobs import NodeReport
from cnbrain.ledger.nodes import Pool, PoolReport, PoolSummary


def reported_summaries(
    pools: Sequence[Pool],
    nodes: Sequence[NodeReport],
    gpu_types: Mapping[str, str],
    gpu_shards: int | None = None,
) -> tuple[PoolReport, ...]:
    """What `nodes` (the scheduler's node list) leave free on each of `pools` (a site's, in
    order). Each node goes to the first pool with room left whose nodes it matches: in an
    accelerator pool, it has exactly the pool's number of GPUs of the type the site names the
    pool's model by (`gpu_types`: model to type; the model's own name when absent); in a CPU
    pool, no GPU and at least the pool's cores. Its free units are its GPUs of that type that
    no job holds (its cores no job holds, in a CPU pool); none when it takes no new job
    (`NodeReport.takes_jobs`) or jobs hold all its CPUs or memory. A pool's nodes that no
    reported node matches count as none free: a node its scheduler does not show runs
    nothing.

    When the site cuts each GPU into `gpu_shards` shards, an accelerator pool's report also
    tells its shared accelerators (`PoolReport.shards`): each GPU of a usable node with
    shards in use (`NodeReport.shards_used`, on a node of one GPU type) and some left, with
    the milli-accelerators its free shards hold (a fraction of m thousandths takes m x
    shards / 1000 shards, rounded up)."""
    free: list[list[int]] = [[] for _ in pools]
    shared: list[list[int]] = [[] for _ in pools]
    for node in nodes:
        for i, pool in enumerate(pools):
            if len(free[i]) < pool.count and _matches(node, pool, gpu_types):
                usable = _usable(node)
                free[i].append(_free_units(node, pool, gpu_types) if usable else 0)
                if usable and gpu_shards and pool.model is not None:
                    shared[i] += _shared_free(node, gpu_shards)
                break
    return tuple(
        PoolReport(
            PoolSummary.of_free_units(pool, units, shares),
            shards=bool(gpu_shards) and pool.model is not None,
        )
        for pool, units, shares in zip(pools, free, shared, strict=True)
    )


def _shared_free(node: NodeReport, gpu_shards: int) -> list[int]:
    """The milli-accelerators the free shards of each GPU of `node` with shards in use hold;
    none on a node of more than one GPU type, whose shard indices name no type."""
    if sum(1 for n in node.gpus.values() if n) != 1:
        return []
    return [
        (gpu_shards - used) * MILLI // gpu_shards
        for used in node.shards_used.values()
        if 0 < used < gpu_shards
    ]


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
