"""What a reservation takes, by id, and over which window of time: the form the ledgers, the
database and the wire share.

The engine works on indices into the map (`Reservation`); `claim_from` and `reservation_of`
turn one form into the other. `window_of` is the window of a request that starts at a given
second: its duration (`duration_seconds`), which is also its run-time limit on the backend.
"""

import math
from dataclasses import dataclass, replace

from cnbrain.domain.bounds import MAX_BANDWIDTH_GBPS
from cnbrain.ledger.calendar import Window
from cnbrain.ledger.nodes import Gang, NodeTake
from cnbrain.ledger.reservation import ComputeClaim, Reservation
from cnbrain.netmap.arrays import MapArrays


@dataclass(frozen=True, slots=True)
class Claim:
    """What reservation `reservation_id` takes, in integer units: compute on `site_id`
    (`accelerator_milli` thousandths of accelerators of `accelerator_model`, None when no
    accelerator) and `mbps` on every
    link of `link_ids`; with `counts_quota`, it counts against `tenant_id`'s quota as one
    active request.

    `site_id` None: no compute here (a part of a cross-brain reservation that only crosses
    this brain's links, or only counts the quota); its compute amounts then count against the
    quota only.

    `window` is when it holds all of that: `[start, end)` in integer epoch seconds, end the
    start plus the request's duration. Releasing the reservation earlier gives the rest of
    the window back.

    `nodes` is how many nodes of one node pool the compute takes, each an equal share of it
    (`gang`), on a site with node pools; the ledger chooses the nodes: `node_takes` when
    they are the gang's and the nodes hold them (the nodes the admission round planned it
    on: `nodes.planned_on`), else by its own rule."""

    reservation_id: str
    request_id: str
    tenant_id: str
    site_id: str | None
    cpu_m: int
    mem_mib: int
    storage_gib: int
    accelerator_model: str | None
    accelerator_milli: int
    link_ids: tuple[str, ...]
    mbps: int
    window: Window
    counts_quota: bool = True
    nodes: int = 1
    node_takes: tuple[NodeTake, ...] = ()

    @property
    def gang(self) -> Gang:
        """The compute as `nodes` equal nodes (`cnbrain.ledger.nodes`)."""
        return Gang.of_amounts(
            nodes=self.nodes,
            cpu_m=self.cpu_m,
            mem_mib=self.mem_mib,
            model=self.accelerator_model,
            acc_milli=self.accelerator_milli,
        )

    def without_compute(self) -> "Claim":
        """This claim with no site and no compute: its links and quota only."""
        return replace(
            self,
            site_id=None,
            cpu_m=0,
            mem_mib=0,
            storage_gib=0,
            accelerator_model=None,
            accelerator_milli=0,
        )


DELIVERY = "delivery"
FLOW_KINDS = frozenset({"staging", "stream", DELIVERY, "serving"})
"""The kinds of flow a reservation or part may hold (`cnbrain.domain.flows`)."""
MAX_FLOW_MBPS = MAX_BANDWIDTH_GBPS * 1000
"""The most a flow may hold on each of its links: a request's largest bandwidth."""


@dataclass(frozen=True, slots=True)
class FlowHold:
    """A flow of reservation `reservation_id`'s request: `mbps` on every link of `link_ids`
    over `window` (integer epoch seconds), its own window rather than the reservation's.
    `kind` is staging, stream, delivery or serving (`cnbrain.domain.flows`); `peer` names
    its far end."""

    reservation_id: str
    kind: str
    peer: str
    link_ids: tuple[str, ...]
    mbps: int
    window: Window


def duration_seconds(duration_hours: float) -> int:
    """A request's duration in whole seconds, rounded up, at least 1: the length of its
    reservation's window, and its run-time limit on the backend (before the grace that
    `regional.job_specs` adds)."""
    return max(1, math.ceil(duration_hours * 3600))


def window_of(*, start_s: int, duration_hours: float) -> Window:
    """The window of a request of `duration_hours` that starts at epoch second `start_s`."""
    return Window.of(start_s, duration_seconds(duration_hours))


def claim_from(
    reservation: Reservation, *, arrays: MapArrays, tenant_id: str, window: Window
) -> Claim:
    """The claim of an engine `Reservation` (indices into `arrays`) for `tenant_id`, held
    over `window`."""
    compute = reservation.compute
    model = arrays.map.accelerator_models[compute.acc_column] if compute.acc_milli else None
    return Claim(
        reservation_id=reservation.id,
        request_id=reservation.request_id,
        tenant_id=tenant_id,
        site_id=arrays.map.sites[compute.site].id,
        cpu_m=compute.cpu_m,
        mem_mib=compute.mem_mib,
        storage_gib=compute.storage_gib,
        accelerator_model=model,
        accelerator_milli=compute.acc_milli if model else 0,
        link_ids=tuple(arrays.map.links[i].id for i in reservation.links),
        mbps=reservation.mbps,
        window=window,
        nodes=compute.gang.nodes if compute.gang else 1,
    )


def reservation_of(claim: Claim, *, arrays: MapArrays) -> Reservation:
    """The engine form of `claim` on `arrays`, to adjust a snapshot by it. A claim without a
    site takes zero compute (on site 0). Raises KeyError for a site or link not on the map."""
    here = claim.site_id is not None
    site = arrays.map.site_index[claim.site_id] if claim.site_id is not None else 0
    column = arrays.accelerator_column.get(claim.accelerator_model or "", -1)
    return Reservation(
        id=claim.reservation_id,
        request_id=claim.request_id,
        compute=ComputeClaim(
            site=site,
            cpu_m=claim.cpu_m if here else 0,
            mem_mib=claim.mem_mib if here else 0,
            storage_gib=claim.storage_gib if here else 0,
            acc_column=column if here else -1,
            acc_milli=claim.accelerator_milli if here and column >= 0 else 0,
            gang=claim.gang if here and claim.nodes > 1 else None,
        ),
        links=tuple(arrays.link_index[link_id] for link_id in claim.link_ids),
        mbps=claim.mbps,
    )
