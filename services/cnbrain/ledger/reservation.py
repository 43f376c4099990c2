"""What a reservation holds, in the ledger's integer units and the map's indices."""

from collections.abc import Sequence
from dataclasses import dataclass

from cnbrain.ledger.nodes import Gang


@dataclass(frozen=True, slots=True)
class ComputeClaim:
    """Compute taken on one site. `acc_column` is -1 when no accelerator is claimed. `gang`
    says how the amounts split over the site's nodes (None: one node holds them all); the
    amounts are the whole gang's."""

    site: int
    cpu_m: int
    mem_mib: int
    storage_gib: int
    acc_column: int = -1
    acc_milli: int = 0
    gang: Gang | None = None


@dataclass(frozen=True, slots=True)
class Reservation:
    """Compute on one site plus `mbps` on every link of a path."""

    id: str
    request_id: str
    compute: ComputeClaim
    links: tuple[int, ...]
    mbps: int


def gang_held(compute: ComputeClaim, accelerator_models: Sequence[str]) -> Gang:
    """The gang `compute` holds: its own, else one node with all of it (`accelerator_models`
    names the map's accelerator columns)."""
    if compute.gang is not None:
        return compute.gang
    return Gang.of_amounts(
        nodes=1,
        cpu_m=compute.cpu_m,
        mem_mib=compute.mem_mib,
        model=accelerator_models[compute.acc_column] if compute.acc_milli else None,
        acc_milli=compute.acc_milli,
    )
