"""Lowest possible path latency from a user's access node to every site, ignoring bandwidth.

The placement filters use it to drop sites that no path could reach within a latency bound
before any path is computed. It is exact for an empty network: the best three-segment path
is the sum of the best path of each segment, because the segments use disjoint links.
"""

import threading

import networkx as nx
import numpy as np

from cnbrain.netmap.arrays import FloatArray, IntArray, MapArrays
from cnbrain.routing.subgraphs import OwnerGraphs


class LatencyBounds:
    """Lazily computed, cached lower bounds; thread-safe."""

    def __init__(self, arrays: MapArrays, graphs: OwnerGraphs) -> None:
        self._arrays = arrays
        self._graphs = graphs
        cmap = arrays.map
        self._gateways = [cmap.provinces[code].gateway for code in cmap.province_codes]
        self._att_site: IntArray = np.asarray(
            [i for i, atts in enumerate(graphs.attachments) for _ in atts], dtype=np.int64
        )
        self._att_node = [a.node for atts in graphs.attachments for a in atts]
        self._att_latency: FloatArray = np.asarray(
            [a.latency_ms for atts in graphs.attachments for a in atts], dtype=np.float64
        )
        self._lock = threading.Lock()
        self._gateway_to_site: FloatArray | None = None
        self._backbone: FloatArray | None = None
        self._from_access: dict[str, FloatArray] = {}

    def to_sites(self, access_node: str) -> FloatArray:
        """Lowest latency in ms from `access_node` to every site (inf where unreachable)."""
        with self._lock:
            cached = self._from_access.get(access_node)
            if cached is None:
                cached = self._compute(access_node)
                cached.setflags(write=False)
                self._from_access[access_node] = cached
            return cached

    def _compute(self, access_node: str) -> FloatArray:
        cmap = self._arrays.map
        province = cmap.node_province[access_node]
        p_idx = cmap.province_codes.index(province)
        local = nx.single_source_dijkstra_path_length(
            self._graphs.province[province], access_node, weight="latency_ms"
        )
        to_gateway = local[cmap.provinces[province].gateway]
        site_province = self._arrays.site_province
        bounds: FloatArray = (
            to_gateway + self._backbone_matrix()[p_idx][site_province] + self._gateway_sites()
        )
        same = site_province == p_idx
        bounds[same] = self._via_attachments(local)[same]
        return bounds

    def _via_attachments(self, core_lengths: dict[str, float]) -> FloatArray:
        """Per site: min over its attachments of core latency to the node plus the link."""
        reach = np.asarray([core_lengths.get(n, np.inf) for n in self._att_node], dtype=np.float64)
        out = np.full(self._arrays.n_sites, np.inf)
        np.minimum.at(out, self._att_site, reach + self._att_latency)
        return out

    def _gateway_sites(self) -> FloatArray:
        if self._gateway_to_site is None:
            cmap = self._arrays.map
            lengths: dict[str, float] = {}
            for code in cmap.province_codes:
                lengths.update(
                    nx.single_source_dijkstra_path_length(
                        self._graphs.province[code],
                        cmap.provinces[code].gateway,
                        weight="latency_ms",
                    )
                )
            self._gateway_to_site = self._via_attachments(lengths)
        return self._gateway_to_site

    def _backbone_matrix(self) -> FloatArray:
        if self._backbone is None:
            n = len(self._gateways)
            matrix = np.full((n, n), np.inf)
            index = {gw: i for i, gw in enumerate(self._gateways)}
            for i, gw in enumerate(self._gateways):
                matrix[i, i] = 0.0
                if gw not in self._graphs.backbone:
                    continue
                lengths = nx.single_source_dijkstra_path_length(
                    self._graphs.backbone, gw, weight="latency_ms"
                )
                for node, ms in lengths.items():
                    j = index.get(node)
                    if j is not None:
                        matrix[i, j] = ms
            self._backbone = matrix
        return self._backbone
