"""Compute-network maps built from Internet Topology Zoo GML files.

The Internet Topology Zoo (Knight et al., "The Internet Topology Zoo", IEEE JSAC 29(9):1765-1775,
2011; CC BY 4.0) describes real networks as PoPs (nodes with Latitude/Longitude) and links.
`zoo_document` turns one file into a map by this rule:

- nodes without both Latitude and Longitude are dropped with their edges, as are self-loops;
  of what remains only the largest connected component is kept (the first one in file order
  when several are equally large);
- every kept node becomes a province of its own in the single region ``zoo``; its code is the
  node's label reduced to ASCII letters, digits and ``_`` (``N<id>`` when nothing is left), made
  unique by a ``_2``, ``_3``.. suffix; its name is the label; demand weights are all 1.0;
- each province has a gateway ``<CODE>-gw`` at the PoP's coordinates, one access node and two
  aggregation nodes built as in `cnbrain.netmap.synthetic.add_province`, scattered within 0.1
  degree of the PoP;
- every GML edge becomes a backbone link between the two gateways, with latency from the
  great-circle distance (`fibre_latency_ms`, floor 0.05 ms), cost proportional to that distance,
  and bandwidth LinkSpeedRaw / 1e9 Gbps; parallel edges collapse into one link with the highest
  LinkSpeedRaw among them; 100 Gbps when none of them has one;
- sites: every province gets one provincial site; the ceil(n/4) provinces of highest degree
  (ties in file order) also get one hub site. Sizes, prices and energy are drawn from `seed` by
  `cnbrain.netmap.synthetic.make_site`.
"""

import math
import random
import re
import unicodedata
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any, Final

import networkx as nx

from cnbrain.domain.enums import SiteKind
from cnbrain.domain.network import Region
from cnbrain.netmap.document import MapDocument
from cnbrain.netmap.errors import MapError
from cnbrain.netmap.synthetic import MapParts, Point, add_province, backbone_link

ZOO_REGION: Final = "zoo"
ZOO_SPREAD_DEG: Final = 0.1
ZOO_DEFAULT_GBPS: Final = 100.0
ZOO_ATTRIBUTION: Final = (
    "Internet Topology Zoo: Knight, Nguyen, Falkner, Bowden, Roughan, 'The Internet Topology "
    "Zoo', IEEE JSAC 29(9):1765-1775, 2011. CC BY 4.0."
)

_GRAPH_OPEN = re.compile(r"\bgraph\s*\[")
_MULTIGRAPH_KEY = re.compile(r"^(\s*)multigraph\s+\S+", re.MULTILINE)
_NOT_CODE = re.compile(r"[^A-Za-z0-9]+")


def zoo_document(path: Path, *, seed: int = 0) -> MapDocument:
    """The map of the Topology Zoo GML file at `path` (see the module docstring for the rule).

    Raises MapError naming the file when it cannot be read, is not GML, has no node with
    coordinates, or carries invalid coordinates or link speeds.
    """
    graph = _read_gml(path)
    pops = _pops(graph, path)
    speeds = _link_speeds(graph, pops, path)
    simple: nx.Graph[Hashable] = nx.Graph()
    simple.add_nodes_from(pops)
    simple.add_edges_from(speeds)
    component = max(nx.connected_components(simple), key=len)
    kept = [node for node in pops if node in component]
    codes = dict(zip(kept, _unique_codes(kept, pops), strict=True))
    by_degree = sorted(kept, key=lambda node: -simple.degree[node])
    hubs = set(by_degree[: math.ceil(len(kept) / 4)])
    network = str(graph.graph.get("Network") or graph.graph.get("label") or path.stem).strip()
    rng = random.Random(seed)
    parts = MapParts(regions=[Region(id=ZOO_REGION, name=network)])
    for node in kept:
        label, lat, lon = pops[node]
        add_province(
            parts,
            rng,
            code=codes[node],
            name=label,
            region=ZOO_REGION,
            lat=lat,
            lon=lon,
            demand_weight=1.0,
            aggregation_nodes=2,
            access_nodes=1,
            site_kinds=(
                [SiteKind.HUB, SiteKind.PROVINCIAL] if node in hubs else [SiteKind.PROVINCIAL]
            ),
            spread_deg=ZOO_SPREAD_DEG,
        )
    gateways: dict[Hashable, Point] = {
        node: (f"{codes[node]}-gw", pops[node][1], pops[node][2]) for node in kept
    }
    for (a, b), speed in speeds.items():
        if a in component:
            gbps = speed / 1e9 if speed is not None else ZOO_DEFAULT_GBPS
            parts.links.append(backbone_link(gateways[a], gateways[b], gbps))
    return parts.document(
        name=f"zoo:{path.stem}",
        description=(
            f"{network} from the Internet Topology Zoo: {len(kept)} of {graph.number_of_nodes()} "
            "nodes kept as provinces (nodes without coordinates and outside the largest "
            "connected component dropped)."
        ),
        attribution=ZOO_ATTRIBUTION,
    )


def _read_gml(path: Path) -> "nx.MultiGraph[Hashable]":
    """Parse `path` as a multigraph (Topology Zoo files may repeat an edge)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MapError(f"{path}: cannot read the GML file ({exc})") from None
    if _MULTIGRAPH_KEY.search(text):
        text = _MULTIGRAPH_KEY.sub(r"\1multigraph 1", text, count=1)
    else:
        text = _GRAPH_OPEN.sub(lambda m: f"{m.group(0)}\n  multigraph 1", text, count=1)
    try:
        graph = nx.parse_gml(text.splitlines(), label="id")
    except (nx.NetworkXError, ValueError) as exc:
        raise MapError(f"{path}: not a valid GML graph ({exc})") from None
    if not isinstance(graph, nx.MultiGraph):
        raise MapError(f"{path}: not a valid GML graph (no 'graph [' block)")
    return graph.to_undirected(as_view=True) if graph.is_directed() else graph


def _pops(graph: "nx.MultiGraph[Hashable]", path: Path) -> dict[Hashable, tuple[str, float, float]]:
    """Label, latitude and longitude of each node that has coordinates, in file order."""
    pops: dict[Hashable, tuple[str, float, float]] = {}
    for node, data in graph.nodes(data=True):
        lat, lon = data.get("Latitude"), data.get("Longitude")
        if lat is None or lon is None:
            continue
        label = str(data.get("label", node))
        if not (_is_number(lat) and _is_number(lon) and -90 <= lat <= 90 and -180 <= lon <= 180):
            raise MapError(
                f"{path}: node {label!r} (id {node}): Latitude {lat!r} / Longitude {lon!r} "
                "are not valid coordinates"
            )
        pops[node] = (label, float(lat), float(lon))
    if not pops:
        raise MapError(f"{path}: no node has both Latitude and Longitude")
    return pops


def _link_speeds(
    graph: "nx.MultiGraph[Hashable]",
    pops: Mapping[Hashable, tuple[str, float, float]],
    path: Path,
) -> dict[tuple[Hashable, Hashable], float | None]:
    """The highest LinkSpeedRaw (bit/s, None when absent) of each pair of PoPs joined by an edge,
    pairs ordered by file order of their nodes."""
    position = {node: i for i, node in enumerate(pops)}
    speeds: dict[tuple[Hashable, Hashable], float | None] = {}
    for u, v, data in graph.edges(data=True):
        if u == v or u not in position or v not in position:
            continue
        pair = (u, v) if position[u] < position[v] else (v, u)
        raw = data.get("LinkSpeedRaw")
        if raw is not None and not (_is_number(raw) and raw > 0):
            raise MapError(
                f"{path}: edge {pops[u][0]!r}--{pops[v][0]!r}: LinkSpeedRaw {raw!r} is not a "
                "positive number"
            )
        speed, best = (None if raw is None else float(raw)), speeds.get(pair)
        speeds[pair] = speed if best is None else best if speed is None else max(best, speed)
    return speeds


def _unique_codes(
    nodes: list[Hashable], pops: Mapping[Hashable, tuple[str, float, float]]
) -> list[str]:
    used: set[str] = set()
    codes = []
    for node in nodes:
        ascii_label = unicodedata.normalize("NFKD", pops[node][0]).encode("ascii", "ignore")
        base = _NOT_CODE.sub("_", ascii_label.decode()).strip("_") or f"N{node}"
        code, suffix = base, 2
        while code in used:
            code, suffix = f"{base}_{suffix}", suffix + 1
        used.add(code)
        codes.append(code)
    return codes


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
