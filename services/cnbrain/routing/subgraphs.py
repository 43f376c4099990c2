"""Each brain's own part of the network: one core graph per province, the backbone, and the
links that attach sites to their province's core."""

from collections import defaultdict
from dataclasses import dataclass

import networkx as nx

from cnbrain.domain.enums import LinkLayer
from cnbrain.netmap.compute_map import ComputeNetworkMap


@dataclass(frozen=True, slots=True)
class Attachment:
    """A link from a site to a network node of its province."""

    node: str
    link: int
    latency_ms: float


@dataclass(frozen=True, slots=True, eq=False)
class OwnerGraphs:
    """`province[code]` holds that province's access and province links between network nodes;
    `backbone` holds the backbone links; `attachments[site index]` the site's own links.
    Sites are endpoints, so they appear in no graph: a path to a site is a core path to one of
    its attachment nodes plus the attaching link."""

    province: dict[str, "nx.Graph[str]"]
    backbone: "nx.Graph[str]"
    attachments: tuple[tuple[Attachment, ...], ...]

    @classmethod
    def build(cls, cmap: ComputeNetworkMap) -> "OwnerGraphs":
        province: dict[str, nx.Graph[str]] = {code: nx.Graph() for code in cmap.province_codes}
        for code, p in cmap.provinces.items():
            province[code].add_nodes_from((p.gateway, *p.access_nodes))
        backbone: nx.Graph[str] = nx.Graph()
        attachments: dict[int, list[Attachment]] = defaultdict(list)
        for idx, link in enumerate(cmap.links):
            if link.a in cmap.site_index:
                attachments[cmap.site_index[link.a]].append(
                    Attachment(link.b, idx, link.latency_ms)
                )
            elif link.b in cmap.site_index:
                attachments[cmap.site_index[link.b]].append(
                    Attachment(link.a, idx, link.latency_ms)
                )
            elif link.layer is LinkLayer.BACKBONE:
                backbone.add_edge(link.a, link.b, idx=idx, latency_ms=link.latency_ms)
            else:
                province[cmap.node_province[link.a]].add_edge(
                    link.a, link.b, idx=idx, latency_ms=link.latency_ms
                )
        return cls(
            province=province,
            backbone=backbone,
            attachments=tuple(tuple(attachments[i]) for i in range(len(cmap.sites))),
        )
