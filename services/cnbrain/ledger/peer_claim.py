"""One brain's part of a reservation that spans brains, as the brains exchange and store it.

A plain value: the database stores it as a peer reservation and the wire carries it as a
`PartClaim`.
"""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PeerClaim:
    """One brain's part of a cross-brain reservation, in integer units.

    `site_id` None: no compute here (the compute amounts still count against the quota when
    `counts_quota`)."""

    reservation_id: str
    request_id: str
    tenant_id: str
    site_id: str | None
    cpu_m: int
    mem_mib: int
    storage_gib: int
    accelerator_model: str | None
    accelerator_count: int
    link_ids: tuple[str, ...]
    mbps: int
    counts_quota: bool
