"""A region's part of the map, as it sends it to the national brain, and what differs between
that part and the national brain's map.

A region's part is its own sites (those of its provinces) and its own links (their owner is
the region), each as its document without the site's execution backend: where a site's jobs
run stays with its region. Its digest names the part: a region sends the part again only
when the digest changes.
"""

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cnbrain.domain.backend_ref import SIMULATOR
from cnbrain.domain.network import Link
from cnbrain.domain.site import Site
from cnbrain.netmap.compute_map import ComputeNetworkMap


@dataclass(frozen=True, slots=True)
class RegionPart:
    """A region's own sites and links (module docstring)."""

    sites: tuple[Site, ...]
    links: tuple[Link, ...]

    @classmethod
    def of(cls, cmap: ComputeNetworkMap, region: str) -> "RegionPart":
        """The part of `cmap` that `region` owns."""
        provinces = {code for code, p in cmap.provinces.items() if p.region == region}
        return cls(
            sites=tuple(_shared(site) for site in cmap.sites if site.province in provinces),
            links=tuple(link for link in cmap.links if link.owner == region),
        )

    def documents(self) -> tuple[list[str], list[str]]:
        """The sites' and links' documents as JSON, in order."""
        return (
            [site.model_dump_json() for site in self.sites],
            [link.model_dump_json() for link in self.links],
        )

    def digest(self) -> str:
        """A digest of the part: equal parts, equal digests."""
        sites, links = self.documents()
        return hashlib.sha256(json.dumps([sites, links]).encode()).hexdigest()


@dataclass(slots=True)
class MapDelta:
    """What to change in a map so that a region's part of it is as the region sent it: new
    sites (each with its new links that attach it), sites whose documents differ, sites to
    retire (with the links that attach them), and links added, changed or retired otherwise."""

    new_sites: list[tuple[Site, list[Link]]] = field(default_factory=list)
    changed_sites: list[Site] = field(default_factory=list)
    retired_sites: list[str] = field(default_factory=list)
    new_links: list[Link] = field(default_factory=list)
    changed_links: list[Link] = field(default_factory=list)
    retired_links: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (
            self.new_sites
            or self.changed_sites
            or self.retired_sites
            or self.new_links
            or self.changed_links
            or self.retired_links
        )

    def summary(self) -> str:
        """The change in words, for the log."""
        counts = {
            "sites added": len(self.new_sites),
            "sites changed": len(self.changed_sites),
            "sites retired": len(self.retired_sites),
            "links added": len(self.new_links) + sum(len(ls) for _, ls in self.new_sites),
            "links changed": len(self.changed_links),
            "links retired": len(self.retired_links),
        }
        return ", ".join(f"{n} {what}" for what, n in counts.items() if n) or "nothing"


def delta(cmap: ComputeNetworkMap, region: str, part: RegionPart) -> MapDelta:
    """What differs between `region`'s part of `cmap` and `part`."""
    mine = RegionPart.of(cmap, region)
    sites = {site.id: site for site in mine.sites}
    links = {link.id: link for link in mine.links}
    sent_sites = {site.id: site for site in part.sites}
    sent_links = {link.id: link for link in part.links}
    out = MapDelta()
    added = [site for site in part.sites if site.id not in sites]
    attached: set[str] = set()
    for site in added:
        its_links = [
            link for link in part.links if site.id in (link.a, link.b) and link.id not in links
        ]
        attached.update(link.id for link in its_links)
        out.new_sites.append((site, its_links))
    out.changed_sites = [
        site for site in part.sites if site.id in sites and _json(site) != _json(sites[site.id])
    ]
    out.retired_sites = [site_id for site_id in sites if site_id not in sent_sites]
    retired = set(out.retired_sites)
    out.new_links = [
        link for link in part.links if link.id not in links and link.id not in attached
    ]
    out.changed_links = [
        link for link in part.links if link.id in links and _json(link) != _json(links[link.id])
    ]
    out.retired_links = [
        link_id
        for link_id, link in links.items()
        if link_id not in sent_links and not ({link.a, link.b} & retired)
    ]
    return out


def part_of(
    region: str,
    provinces: frozenset[str],
    sites_json: Sequence[str],
    links_json: Sequence[str],
) -> RegionPart:
    """The part a region sent, checked: every site in one of its `provinces` and every link
    its own. Raises ValueError (pydantic's ValidationError is one) naming what is wrong."""
    sites = tuple(_shared(Site.model_validate_json(text)) for text in sites_json)
    links = tuple(Link.model_validate_json(text) for text in links_json)
    for site in sites:
        if site.province not in provinces:
            raise ValueError(
                f"site {site.id!r} is in province {site.province!r}, not of {region!r}"
            )
    for link in links:
        if link.owner != region:
            raise ValueError(f"link {link.id!r} is owned by {link.owner!r}, not {region!r}")
    return RegionPart(sites=sites, links=links)


def _shared(site: Site) -> Site:
    """`site` without its execution backend."""
    return site if site.execution == SIMULATOR else site.model_copy(update={"execution": SIMULATOR})


def _json(model: Site | Link) -> Any:
    return model.model_dump(mode="json")
