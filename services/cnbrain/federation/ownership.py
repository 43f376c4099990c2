"""Which sites and links a brain owns, and its view of free capacity limited to them."""

from dataclasses import dataclass

import numpy as np

from cnbrain.domain.network import NATIONAL_OWNER
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.netmap.compute_map import ComputeNetworkMap


@dataclass(frozen=True, slots=True, eq=False)
class Ownership:
    """`owner` is a region id or 'national'. A region owns the sites of its provinces and the
    links whose owner it is (province, access and site links); the national brain owns the
    backbone links and no site."""

    owner: str
    provinces: frozenset[str]
    sites: np.ndarray
    links: np.ndarray

    @classmethod
    def of(cls, cmap: ComputeNetworkMap, owner: str) -> "Ownership":
        if owner != NATIONAL_OWNER and owner not in cmap.regions:
            known = ", ".join(cmap.regions)
            raise ValueError(f"unknown region {owner!r}; the map's regions: {known}")
        provinces = frozenset(code for code, p in cmap.provinces.items() if p.region == owner)
        sites = np.asarray([s.province in provinces for s in cmap.sites], dtype=bool)
        links = np.asarray([link.owner == owner for link in cmap.links], dtype=bool)
        return cls(owner=owner, provinces=provinces, sites=sites, links=links)

    @classmethod
    def everything(cls, cmap: ComputeNetworkMap) -> "Ownership":
        """A standalone brain's: every province, site and link of the map."""
        return cls(
            owner="",
            provinces=frozenset(cmap.provinces),
            sites=np.ones(len(cmap.sites), dtype=bool),
            links=np.ones(len(cmap.links), dtype=bool),
        )

    def owns_link(self, index: int) -> bool:
        return bool(self.links[index])

    def restrict(self, snapshot: Snapshot) -> Snapshot:
        """`snapshot` with nothing free outside this owner's sites and links."""
        return snapshot.restricted(sites=self.sites, links=self.links)
