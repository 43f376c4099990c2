"""The resources of a brain's calendar, by key, and what a claim demands of them.

A site's resources are keyed by its index in the map's arrays: `("site", i, "cpu_m")`,
`("site", i, "mem_mib")`, `("site", i, "storage_gib")` and `("site", i, "acc", model)` for
each accelerator model it has a pool of; a link's bandwidth by its index: `("link", j)`.
Amounts are the ledger's integer units (millicores, MiB, GiB, thousandths of accelerators,
Mbps).
"""

from typing import Final

from cnbrain.ledger.claim import Claim
from cnbrain.netmap.arrays import MapArrays

ResourceKey = tuple[str, int] | tuple[str, int, str] | tuple[str, int, str, str]
"""The key of one resource of a calendar (see the module docstring)."""

SITE_COMPUTE: Final = ("cpu_m", "mem_mib", "storage_gib")
"""The names of a site's resources other than accelerators, as `Claim` names its amounts."""


def site_key(site: int, resource: str) -> ResourceKey:
    """The key of `resource` (one of `SITE_COMPUTE`) of the site of index `site`."""
    return ("site", site, resource)


def accelerator_key(site: int, model: str) -> ResourceKey:
    """The key of the pool of `model` accelerators of the site of index `site`."""
    return ("site", site, "acc", model)


def link_key(link: int) -> ResourceKey:
    """The key of the bandwidth of the link of index `link`."""
    return ("link", link)


def demand_of(claim: Claim, *, arrays: MapArrays) -> dict[ResourceKey, int]:
    """What `claim` takes of each resource of `arrays`' map, leaving out zero amounts: its
    compute on its site (none when its site is None), its accelerators in the pool of their
    model, its Mbps on each of its links. What a quota counts is no resource of a calendar.
    Raises KeyError for a site or link not on the map."""
    demand: dict[ResourceKey, int] = {}
    if claim.site_id is not None:
        site = arrays.map.site_index[claim.site_id]
        amounts = (claim.cpu_m, claim.mem_mib, claim.storage_gib)
        for resource, amount in zip(SITE_COMPUTE, amounts, strict=True):
            if amount:
                demand[site_key(site, resource)] = amount
        if claim.accelerator_milli and claim.accelerator_model:
            demand[accelerator_key(site, claim.accelerator_model)] = claim.accelerator_milli
    if claim.mbps:
        for link_id in claim.link_ids:
            demand[link_key(arrays.link_index[link_id])] = claim.mbps
    return demand
