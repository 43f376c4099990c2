"""The compute-network map: a validated, immutable graph of provinces, sites and links."""

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import networkx as nx

from cnbrain.domain.accelerators import ACCELERATOR_MODELS
from cnbrain.domain.enums import LinkLayer, NodeRole
from cnbrain.domain.network import NATIONAL_OWNER, Link, Node, Province, Region
from cnbrain.domain.site import Site
from cnbrain.netmap.document import MapDocument
from cnbrain.netmap.errors import MapError

_BACKBONE_ROLES = frozenset({NodeRole.GATEWAY, NodeRole.BACKBONE})


@dataclass(frozen=True, slots=True)
class ComputeNetworkMap:
    """A checked map. Build it with `ComputeNetworkMap.from_document`; never mutate it.

    Sites are endpoints: they link only to network nodes, and no path passes through a site.

    `graph` is an undirected networkx graph over node and site ids; each edge carries `idx`
    (position in `links`), `latency_ms` and `layer`.
    """

    document: MapDocument
    graph: "nx.Graph[str]"
    regions: Mapping[str, Region]
    provinces: Mapping[str, Province]
    province_codes: tuple[str, ...]
    nodes: Mapping[str, Node]
    sites: tuple[Site, ...]
    site_index: Mapping[str, int]
    links: tuple[Link, ...]
    node_province: Mapping[str, str]
    accelerator_models: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.document.name

    @classmethod
    def from_document(cls, document: MapDocument) -> "ComputeNetworkMap":
        """Check every cross-reference of `document` and build the map.

        Raises MapError naming the first item at fault.
        """
        regions = _unique({r.id: r for r in document.regions}, document.regions, "region", "id")
        provinces = _unique(
            {p.code: p for p in document.provinces}, document.provinces, "province", "code"
        )
        nodes = _unique({n.id: n for n in document.nodes}, document.nodes, "node", "id")
        sites = document.sites
        site_index = _unique({s.id: i for i, s in enumerate(sites)}, sites, "site", "id")
        node_province: dict[str, str] = {}
        for node in document.nodes:
            if node.province not in provinces:
                raise MapError(f"node {node.id!r}: province {node.province!r} is unknown")
            node_province[node.id] = node.province
        for site in sites:
            if site.id in nodes:
                raise MapError(f"site {site.id!r}: the id is already used by a network node")
            _check_site(site, provinces)
            node_province[site.id] = site.province
        for province in document.provinces:
            _check_province(province, regions, nodes)
        links = tuple(_check_link(link, nodes, node_province, provinces) for link in document.links)
        graph = _build_graph(document, links)
        _check_reachability(document, nodes, provinces)
        present = {m for s in sites for m, n in s.capacity.accelerators.items() if n > 0}
        return cls(
            document=document,
            graph=graph,
            regions=MappingProxyType(regions),
            provinces=MappingProxyType(provinces),
            province_codes=tuple(provinces),
            nodes=MappingProxyType(nodes),
            sites=sites,
            site_index=MappingProxyType(site_index),
            links=links,
            node_province=MappingProxyType(node_province),
            accelerator_models=tuple(m for m in ACCELERATOR_MODELS if m in present),
        )

    def region_of(self, province: str) -> str:
        return self.provinces[province].region

    def site(self, site_id: str) -> Site:
        return self.sites[self.site_index[site_id]]


def _unique(mapping: dict[str, Any], items: tuple[Any, ...], kind: str, key: str) -> dict[str, Any]:
    if len(mapping) != len(items):
        seen: set[str] = set()
        for item in items:
            value = getattr(item, key)
            if value in seen:
                raise MapError(f"{kind} {value!r}: {key} appears more than once")
            seen.add(value)
    return mapping


def _check_site(site: Site, provinces: Mapping[str, Province]) -> None:
    if site.province not in provinces:
        raise MapError(f"site {site.id!r}: province {site.province!r} is unknown")
    for model, count in site.capacity.accelerators.items():
        if model not in ACCELERATOR_MODELS:
            raise MapError(
                f"site {site.id!r}: capacity.accelerators: model {model!r} is not in the "
                f"accelerator catalog ({', '.join(ACCELERATOR_MODELS)})"
            )
        if count < 0:
            raise MapError(f"site {site.id!r}: capacity.accelerators.{model} is negative ({count})")
        if count > 0 and model not in site.prices.accelerator_hour:
            raise MapError(f"site {site.id!r}: prices.accelerator_hour has no price for {model!r}")
    _check_pools(site)


def _check_pools(site: Site) -> None:
    """MapError unless the site's node pools are of catalog models and, together, within its
    capacity (cores, memory, and accelerators of each model)."""
    pools = site.node_pools
    if not pools:
        return
    capacity = site.capacity
    held: dict[str, float] = {
        "cpu_cores": sum(p.count * p.cpu_cores for p in pools),
        "memory_gib": sum(p.count * p.memory_gib for p in pools),
    }
    for name, amount in held.items():
        if amount > getattr(capacity, name) * (1 + 1e-9):
            raise MapError(
                f"site {site.id!r}: node_pools hold {amount:g} {name}, more than its capacity "
                f"({getattr(capacity, name):g})"
            )
    devices: dict[str, int] = {}
    for pool in pools:
        if pool.accelerator is not None:
            devices[pool.accelerator] = (
                devices.get(pool.accelerator, 0) + pool.count * pool.accelerators
            )
    for model, count in sorted(devices.items()):
        has = capacity.accelerators.get(model, 0)
        if count > has:
            raise MapError(
                f"site {site.id!r}: node_pools hold {count} {model}, more than its capacity ({has})"
            )


def _check_province(
    province: Province, regions: Mapping[str, Region], nodes: Mapping[str, Node]
) -> None:
    where = f"province {province.code!r}"
    if province.region not in regions:
        raise MapError(f"{where}: region {province.region!r} is unknown")
    gateway = nodes.get(province.gateway)
    if gateway is None or gateway.role is not NodeRole.GATEWAY:
        raise MapError(f"{where}: gateway {province.gateway!r} is not a gateway node of the map")
    if gateway.province != province.code:
        raise MapError(
            f"{where}: gateway {province.gateway!r} lies in province {gateway.province!r}"
        )
    if not province.access_nodes:
        raise MapError(f"{where}: access_nodes is empty; users need at least one access node")
    for access in province.access_nodes:
        node = nodes.get(access)
        if node is None or node.role is not NodeRole.ACCESS or node.province != province.code:
            raise MapError(
                f"{where}: access node {access!r} is not an access node of this province"
            )


def _check_link(
    link: Link,
    nodes: Mapping[str, Node],
    node_province: Mapping[str, str],
    provinces: Mapping[str, Province],
) -> Link:
    where = f"link {link.id!r}"
    for end in (link.a, link.b):
        if end not in node_province:
            raise MapError(f"{where}: node {end!r} is unknown")
    if link.a == link.b:
        raise MapError(f"{where}: a link must join two different nodes")
    if link.a not in nodes and link.b not in nodes:
        raise MapError(
            f"{where}: sites are endpoints; a site links to network nodes, not to another site"
        )
    if link.layer is LinkLayer.BACKBONE:
        for end in (link.a, link.b):
            node = nodes.get(end)
            if node is None or node.role not in _BACKBONE_ROLES:
                raise MapError(
                    f"{where}: backbone links join gateway or backbone nodes, not {end!r}"
                )
        owner = NATIONAL_OWNER
    else:
        pa, pb = node_province[link.a], node_province[link.b]
        if pa != pb:
            raise MapError(f"{where}: a {link.layer} link must stay in one province ({pa} vs {pb})")
        owner = provinces[pa].region
    if link.owner and link.owner != owner:
        raise MapError(
            f"{where}: owner {link.owner!r} does not own a {link.layer} link here ({owner})"
        )
    return link if link.owner else link.model_copy(update={"owner": owner})


def _build_graph(document: MapDocument, links: tuple[Link, ...]) -> "nx.Graph[str]":
    graph: nx.Graph[str] = nx.Graph(name=document.name)
    graph.add_nodes_from((n.id, {"role": n.role, "province": n.province}) for n in document.nodes)
    graph.add_nodes_from(
        (s.id, {"role": NodeRole.SITE, "province": s.province}) for s in document.sites
    )
    for idx, link in enumerate(links):
        if graph.has_edge(link.a, link.b):
            raise MapError(f"link {link.id!r}: the two nodes are already joined by another link")
        graph.add_edge(link.a, link.b, idx=idx, latency_ms=link.latency_ms, layer=link.layer)
    return graph


def _check_reachability(
    document: MapDocument, node_ids: Mapping[str, Node], provinces: Mapping[str, Province]
) -> None:
    """Every access node reaches its gateway over its province's links between network nodes,
    every site links to a network node that does (sites carry no transit), and every gateway
    reaches every other over the backbone."""
    inside: nx.utils.UnionFind[str] = nx.utils.UnionFind(node_ids)
    backbone: nx.utils.UnionFind[str] = nx.utils.UnionFind(p.gateway for p in provinces.values())
    attached: dict[str, list[str]] = {site.id: [] for site in document.sites}
    for link in document.links:
        if link.layer is LinkLayer.BACKBONE:
            backbone.union(link.a, link.b)
        elif link.a in attached:
            attached[link.a].append(link.b)
        elif link.b in attached:
            attached[link.b].append(link.a)
        else:
            inside.union(link.a, link.b)
    for site in document.sites:
        gateway = provinces[site.province].gateway
        if not any(inside[node] == inside[gateway] for node in attached[site.id]):
            raise MapError(
                f"province {site.province!r}: {site.id!r} cannot reach gateway {gateway!r} "
                "over the province's own links"
            )
    first = next(iter(provinces.values())).gateway if provinces else ""
    for code, province in provinces.items():
        for access in province.access_nodes:
            if inside[access] != inside[province.gateway]:
                raise MapError(
                    f"province {code!r}: {access!r} cannot reach gateway {province.gateway!r} "
                    "over the province's own links"
                )
        if backbone[province.gateway] != backbone[first]:
            raise MapError(
                f"province {code!r}: gateway {province.gateway!r} is cut off from the backbone"
            )
