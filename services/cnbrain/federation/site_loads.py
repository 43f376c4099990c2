"""The load of a region's own sites on its summary (`national_pb2.RegionSummary.site_loads`):
made by the region from its ledger's capacity view (`ledger.utilisation.site_uses`, the
figures its capacity API, metrics and console show), and checked by the national brain as an
operator's input is."""

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from cnbrain.federation.codec import WireError
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.ledger.utilisation import Owned, site_uses
from cnbrain.v1 import national_pb2

MAX_WIRE_SITE_LOADS: Final = 100_000
"""Site loads one summary may carry at most (as many as a region's part of the map may hold
sites and links)."""


def site_load_messages(snapshot: Snapshot, *, owned: Owned) -> list[national_pb2.SiteLoad]:
    """The load of every site whose flag in `owned` is set, in map order, as `snapshot`
    shows it."""
    return [
        national_pb2.SiteLoad(site_id=use.site.id, utilisation=use.utilisation)
        for use in site_uses(snapshot, owned=owned)
    ]


@dataclass(frozen=True, slots=True)
class SiteLoads:
    """What a summary says of its region's sites: each one's load by site id (`loads`), and
    the ids it named that are not the region's (`dropped`, left out of `loads`)."""

    loads: Mapping[str, float]
    dropped: frozenset[str]


def site_loads_of(
    messages: Sequence[national_pb2.SiteLoad],
    *,
    sites: Collection[str],
    field: str = "site_loads",
) -> SiteLoads:
    """The loads `messages` carry of the sites `sites` (the region's, on the receiver's map).
    Raises WireError naming the entry at fault: more than `MAX_WIRE_SITE_LOADS` entries, a
    site of `sites` named twice, or a utilisation that is not finite within [0, 1]. An entry
    naming a site not in `sites` is left out and its id kept in `dropped`."""
    if len(messages) > MAX_WIRE_SITE_LOADS:
        raise WireError(f"{len(messages)} entries, more than {MAX_WIRE_SITE_LOADS}", field=field)
    loads: dict[str, float] = {}
    dropped: set[str] = set()
    for index, message in enumerate(messages):
        share = message.utilisation
        if not (math.isfinite(share) and 0.0 <= share <= 1.0):
            raise WireError(
                f"must be finite within [0, 1], not {share!r}",
                field=f"{field}[{index}].utilisation",
            )
        site = message.site_id
        if site not in sites:
            dropped.add(site)
        elif site in loads:
            raise WireError(f"site {site!r} is named twice", field=f"{field}[{index}].site_id")
        else:
            loads[site] = share
    return SiteLoads(loads=loads, dropped=frozenset(dropped))
