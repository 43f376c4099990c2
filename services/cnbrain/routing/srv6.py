"""SRv6 segment lists for routes.

Every node gets an End SID inside its owner's locator block: `fc00:<owner>:<hi>:<lo>::`,
where owner 0 is the national backbone and 1.. are the regions in map order, and hi/lo are
the two 16-bit halves of the node's index in the map. Gateway and backbone nodes belong to
the national block; every other node to its province's region.
"""

import ipaddress
from collections.abc import Mapping
from types import MappingProxyType

from cnbrain.domain.enums import NodeRole
from cnbrain.netmap.compute_map import ComputeNetworkMap
from cnbrain.routing.router import Route


class SidPlan:
    """The End SID of every node of one map."""

    def __init__(self, cmap: ComputeNetworkMap) -> None:
        region_block = {rid: i + 1 for i, rid in enumerate(cmap.regions)}
        self._map = cmap
        self._region_block = region_block
        self._sids: dict[str, str] = {}
        self._index: Mapping[str, int] = MappingProxyType(
            {node: i for i, node in enumerate([*cmap.nodes, *(s.id for s in cmap.sites)])}
        )

    def sid(self, node: str) -> str:
        """The End SID of `node`; KeyError for a node not on the map."""
        sid = self._sids.get(node)
        if sid is None:
            sid = self._sids[node] = self._make_sid(node)
        return sid

    def _make_sid(self, node: str) -> str:
        index = self._index[node]
        role = self._map.nodes[node].role if node in self._map.nodes else NodeRole.SITE
        if role in (NodeRole.GATEWAY, NodeRole.BACKBONE):
            block = 0
        else:
            block = self._region_block[self._map.region_of(self._map.node_province[node])]
        return str(ipaddress.IPv6Address(f"fc00:{block:x}:{index >> 16:x}:{index & 0xFFFF:x}::"))

    def segment_list(self, route: Route) -> tuple[str, ...]:
        """Strict segment list: the SID of every node after the first, in travel order."""
        nodes: list[str] = []
        for segment in route.segments:
            for node in segment.path.nodes:
                if not nodes or nodes[-1] != node:
                    nodes.append(node)
        return tuple(self.sid(n) for n in nodes[1:])
