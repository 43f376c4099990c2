"""The map the console draws (`views.MapView`), built from a brain's map and what it knows of
the load of its parts."""

from collections.abc import Mapping, Sequence

import numpy as np

from cnbrain.console.views import (
    LinkMark,
    MapView,
    NodeMark,
    ProvinceMark,
    RegionMark,
    SiteMark,
)
from cnbrain.ledger.snapshot import Snapshot
from cnbrain.ledger.utilisation import link_shares, site_shares
from cnbrain.netmap.compute_map import ComputeNetworkMap

Loads = Sequence[float | None]
"""One load per site (or link) of a map, in its order: a share of capacity, or None."""

DIGITS = 4
"""Loads are rounded to this many decimals (a hundredth of a percent)."""


def snapshot_loads(
    snapshot: Snapshot, *, sites: np.ndarray, links: np.ndarray
) -> tuple[Loads, Loads]:
    """The load of each site and link of `snapshot`'s map, where the masks `sites` and `links`
    (one bool each) say the snapshot holds it; None elsewhere. A load is the share the REST
    API's capacity reads and the metrics show (`ledger.utilisation`), from 0 to 1."""
    site_load = site_shares(snapshot).tolist()
    link_load = link_shares(snapshot).tolist()
    return (
        [_share(u) if mine else None for u, mine in zip(site_load, sites.tolist(), strict=True)],
        [_share(u) if mine else None for u, mine in zip(link_load, links.tolist(), strict=True)],
    )


def loads_by_id(ids: Sequence[str], loads: Mapping[str, float]) -> Loads:
    """The load `loads` holds of each of `ids`, rounded and within 0 to 1 as `snapshot_loads`
    gives them; None for an id it does not hold."""
    return [_maybe_share(loads.get(one)) for one in ids]


def map_view(
    cmap: ComputeNetworkMap,
    *,
    owner: str | None,
    site_load: Loads,
    link_load: Loads,
    load_note: str,
    regions: Sequence[RegionMark] | None = None,
    gateway_load: Mapping[str, float] | None = None,
) -> MapView:
    """Every part of `cmap` with its load (`site_load`, `link_load`: one per site and link;
    `gateway_load`: by province code). `owner` is what the brain owns: a region id, the
    national brain's backbone, or None (standalone: everything). `regions` defaults to the
    map's regions, as `owner` owns them. Raises ValueError when a list of loads does not
    match the map."""
    if len(site_load) != len(cmap.sites) or len(link_load) != len(cmap.links):
        raise ValueError("one load per site and per link of the map is needed")

    def owns_region(region: str) -> bool:
        return owner is None or owner == region

    gateways = gateway_load or {}
    return MapView(
        name=cmap.name,
        attribution=cmap.document.attribution,
        owner=owner,
        load_visible=True,
        load_note=load_note,
        regions=list(regions)
        if regions is not None
        else [
            RegionMark(id=r.id, name=r.name, owned=owns_region(r.id)) for r in cmap.regions.values()
        ],
        provinces=[
            ProvinceMark(
                code=p.code,
                name=p.name,
                name_zh=p.name_zh,
                region=p.region,
                lat=p.lat,
                lon=p.lon,
                owned=owns_region(p.region),
                gateway_utilisation=_maybe_share(gateways.get(p.code)),
            )
            for p in cmap.provinces.values()
        ],
        nodes=[
            NodeMark(id=n.id, role=str(n.role), province=n.province, lat=n.lat, lon=n.lon)
            for n in cmap.nodes.values()
        ],
        sites=[
            SiteMark(
                id=s.id,
                name=s.name,
                province=s.province,
                kind=str(s.kind),
                lat=s.lat,
                lon=s.lon,
                owned=owns_region(cmap.provinces[s.province].region),
                utilisation=load,
            )
            for s, load in zip(cmap.sites, site_load, strict=True)
        ],
        links=[
            LinkMark(
                id=link.id,
                a=link.a,
                b=link.b,
                layer=str(link.layer),
                owner=link.owner,
                bandwidth_gbps=link.bandwidth_gbps,
                owned=owner is None or link.owner == owner,
                utilisation=load,
            )
            for link, load in zip(cmap.links, link_load, strict=True)
        ],
    )


def without_load(view: MapView) -> MapView:
    """`view` with every load, and every region's summary, left out: the layout alone."""
    return view.model_copy(
        update={
            "load_visible": False,
            "load_note": "load is shown to operators and admins only",
            "regions": [
                r.model_copy(update={"summary_age_s": None, "accelerators": None})
                for r in view.regions
            ],
            "provinces": [
                p.model_copy(update={"gateway_utilisation": None}) for p in view.provinces
            ],
            "sites": [s.model_copy(update={"utilisation": None}) for s in view.sites],
            "links": [link.model_copy(update={"utilisation": None}) for link in view.links],
        }
    )


def _share(value: float) -> float:
    return round(min(max(float(value), 0.0), 1.0), DIGITS)


def _maybe_share(value: float | None) -> float | None:
    return None if value is None else _share(value)
