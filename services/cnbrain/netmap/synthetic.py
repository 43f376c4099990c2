"""Seeded synthetic compute-network maps of any size, for tests and benchmarks.

A spec ``synthetic:provinces=P,sites_per_province=S,seed=K`` (seed optional, default 0) names
the map `synthetic_document(provinces=P, sites_per_province=S, seed=K)`. The same arguments
always give an identical document. The generated map:

- provinces ``P000``.. (wider codes when P > 1000) with capitals drawn uniformly in China's
  bounding box (lat 20-48, lon 80-125) and a lognormal demand weight; regions ``r0``.. of at
  most 8 geographically neighbouring provinces;
- per province a gateway ``<CODE>-gw`` at the capital, ``max(2, S // 25)`` aggregation nodes
  ``<CODE>-agg-<i>`` in a ring whose first two join the gateway, and 1-3 access nodes
  ``<CODE>-acc-<i>`` each joined to the gateway and to one aggregation node;
- exactly S sites per province ``<CODE>-<kind>-<j>``, each dual-homed to two consecutive
  aggregation nodes. About a quarter of the provinces (at least one) are hub provinces whose
  first ``min(2, S)`` sites are hubs; every other site is provincial, edge or idle with
  probabilities 0.2 / 0.6 / 0.2. So the map has exactly ``P * S`` sites;
- a backbone of 400 Gbps links between gateways: a Euclidean minimum spanning tree over the
  capitals (computed on each capital's 10 nearest neighbours, the cut property joining any
  pieces left) plus, for each gateway, links to its two nearest gateways it is not yet joined to.

Latencies come from `fibre_latency_ms` with a floor of 0.05 ms. The province builder and the
site maker here are shared with the Topology Zoo loader.
"""

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from pydantic import TypeAdapter

from cnbrain.domain.enums import CpuArch, Interconnect, LinkLayer, NodeRole, SiteKind
from cnbrain.domain.network import NATIONAL_OWNER, Link, Node, Province, Region
from cnbrain.domain.site import Site
from cnbrain.netmap.document import MapDocument
from cnbrain.netmap.errors import MapError
from cnbrain.netmap.geo import fibre_latency_ms, great_circle_km

SYNTHETIC_PREFIX: Final = "synthetic:"
MAX_SITES: Final = 100_000
"""Upper bound of provinces * sites_per_province."""

PROVINCES_PER_REGION: Final = 8
LATENCY_FLOOR_MS: Final = 0.05
ACCESS_GBPS: Final = 100.0
AGGREGATION_GBPS: Final = 800.0
BACKBONE_GBPS: Final = 400.0
BACKBONE_CNY_PER_GBPS_HOUR_KM: Final = 0.00002
"""Backbone cost per reserved Gbps-hour is proportional to the great-circle length: 0.02 CNY per
1000 km, the rate of the built-in map."""

CHINA_LAT: Final = (20.0, 48.0)
CHINA_LON: Final = (80.0, 125.0)
SYNTHETIC_SPREAD_DEG: Final = 2.0
"""Nodes and sites lie within this many degrees (each axis) of their province's capital."""

_SPEC_KEYS: Final = ("provinces", "sites_per_province", "seed")
_INTEGER = re.compile(r"[+-]?\d+")
_NEIGHBOURS: Final = 10
_BRUTE_FORCE_POINTS: Final = 1024
_GRID_RINGS: Final = 2
_OTHER_KINDS: Final = (SiteKind.PROVINCIAL, SiteKind.EDGE, SiteKind.IDLE)
_OTHER_WEIGHTS: Final = (0.2, 0.6, 0.2)

Raw = dict[str, Any]
IntArray = npt.NDArray[np.intp]
FloatArray = npt.NDArray[np.float64]


def parse_synthetic_spec(spec: str) -> dict[str, int]:
    """Parse ``synthetic:provinces=P,sites_per_province=S[,seed=K]`` into keyword arguments of
    `synthetic_document`.

    Raises MapError naming the key at fault: unknown, repeated, missing, not an integer, or out
    of range (P >= 1, S >= 1, P * S <= 100,000, seed >= 0).
    """
    if not spec.startswith(SYNTHETIC_PREFIX):
        raise MapError(f"map {spec!r}: a synthetic spec starts with {SYNTHETIC_PREFIX!r}")
    values: dict[str, int] = {}
    for part in spec[len(SYNTHETIC_PREFIX) :].split(","):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep:
            raise MapError(f"map {spec!r}: {part.strip()!r} is not key=value")
        if key not in _SPEC_KEYS:
            raise MapError(f"map {spec!r}: unknown key {key!r}; use {', '.join(_SPEC_KEYS)}")
        if key in values:
            raise MapError(f"map {spec!r}: key {key!r} appears more than once")
        if not _INTEGER.fullmatch(value):
            raise MapError(f"map {spec!r}: {key} must be an integer, not {value!r}")
        values[key] = int(value)
    for key in _SPEC_KEYS[:2]:
        if key not in values:
            raise MapError(f"map {spec!r}: key {key!r} is missing")
    values.setdefault("seed", 0)
    _check_sizes(values["provinces"], values["sites_per_province"], values["seed"], spec)
    return values


def synthetic_document(*, provinces: int, sites_per_province: int, seed: int) -> MapDocument:
    """The synthetic map of `provinces` provinces with `sites_per_province` sites each (hub sites
    included), drawn from `seed`. Raises MapError for arguments out of range."""
    name = (
        f"{SYNTHETIC_PREFIX}provinces={provinces},"
        f"sites_per_province={sites_per_province},seed={seed}"
    )
    _check_sizes(provinces, sites_per_province, seed, name)
    rng = random.Random(seed)
    width = max(3, len(str(provinces - 1)))
    codes = [f"P{i:0{width}d}" for i in range(provinces)]
    lats = [rng.uniform(*CHINA_LAT) for _ in codes]
    lons = [rng.uniform(*CHINA_LON) for _ in codes]
    region_of, region_count = _group_regions(lats, lons)
    hubs = set(rng.sample(range(provinces), max(1, (provinces + 2) // 4)))
    parts = MapParts()
    parts.regions = [Region(id=f"r{r}", name=f"Region {r}") for r in range(region_count)]
    for i, code in enumerate(codes):
        hub_sites = min(2, sites_per_province) if i in hubs else 0
        kinds = [SiteKind.HUB] * hub_sites + rng.choices(
            _OTHER_KINDS, _OTHER_WEIGHTS, k=sites_per_province - hub_sites
        )
        add_province(
            parts,
            rng,
            code=code,
            name=f"Province {code[1:]}",
            region=f"r{region_of[i]}",
            lat=lats[i],
            lon=lons[i],
            demand_weight=round(rng.lognormvariate(0.0, 0.8), 3),
            aggregation_nodes=max(2, sites_per_province // 25),
            access_nodes=rng.randint(1, 3),
            site_kinds=kinds,
            spread_deg=SYNTHETIC_SPREAD_DEG,
        )
    gateways = [(f"{code}-gw", lats[i], lons[i]) for i, code in enumerate(codes)]
    for a, b in _backbone_pairs(lats, lons):
        parts.links.append(backbone_link(gateways[a], gateways[b], BACKBONE_GBPS))
    return parts.document(
        name=name,
        description=(
            f"Seeded synthetic map: {provinces} provinces, {sites_per_province} sites each "
            f"({provinces * sites_per_province} sites), seed {seed}."
        ),
    )


def _check_sizes(provinces: int, sites_per_province: int, seed: int, where: str) -> None:
    if provinces < 1:
        raise MapError(f"map {where!r}: provinces must be at least 1, not {provinces}")
    if sites_per_province < 1:
        raise MapError(
            f"map {where!r}: sites_per_province must be at least 1, not {sites_per_province}"
        )
    if provinces * sites_per_province > MAX_SITES:
        raise MapError(
            f"map {where!r}: provinces * sites_per_province is {provinces * sites_per_province}, "
            f"more than {MAX_SITES}"
        )
    if seed < 0:
        raise MapError(f"map {where!r}: seed must not be negative, not {seed}")


@dataclass(slots=True)
class MapParts:
    """The sections of a map document under construction, each item already validated."""

    regions: list[Region] = field(default_factory=list)
    provinces: list[Province] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    sites: list[Site] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)

    def document(self, *, name: str, description: str = "", attribution: str = "") -> MapDocument:
        """The parts as one MapDocument (not yet checked by ComputeNetworkMap.from_document)."""
        return MapDocument(
            name=name,
            description=description,
            attribution=attribution,
            regions=tuple(self.regions),
            provinces=tuple(self.provinces),
            nodes=tuple(self.nodes),
            sites=tuple(self.sites),
            links=tuple(self.links),
        )


_NODES: Final = TypeAdapter(list[Node])
_SITES: Final = TypeAdapter(list[Site])
_LINKS: Final = TypeAdapter(list[Link])


Point = tuple[str, float, float]
"""A node or site id with its latitude and longitude."""


def add_province(
    parts: MapParts,
    rng: random.Random,
    *,
    code: str,
    name: str,
    region: str,
    lat: float,
    lon: float,
    demand_weight: float,
    aggregation_nodes: int,
    access_nodes: int,
    site_kinds: Sequence[SiteKind],
    spread_deg: float,
) -> None:
    """Append province `code` with its gateway (at lat/lon), aggregation ring, access nodes and
    one site per entry of `site_kinds`, all links owned by `region`.

    Aggregation nodes (at least 2) form a ring (a single link when there are two) and the first
    two join the gateway at 800 Gbps; access node i joins the gateway and aggregation node
    i mod n at 100 Gbps; site j joins aggregation nodes j and j+1 (mod n) by its uplink speed.
    Node and site positions are drawn within `spread_deg` degrees of the gateway.
    """
    if aggregation_nodes < 2 or access_nodes < 1:
        raise ValueError("a province needs at least 2 aggregation nodes and 1 access node")
    gateway: Point = (f"{code}-gw", lat, lon)
    aggs = [
        _scatter(rng, f"{code}-agg-{i}", lat, lon, spread_deg) for i in range(aggregation_nodes)
    ]
    accs = [_scatter(rng, f"{code}-acc-{i}", lat, lon, spread_deg) for i in range(access_nodes)]
    parts.provinces.append(
        Province(
            code=code,
            name=name,
            region=region,
            gateway=gateway[0],
            access_nodes=tuple(a[0] for a in accs),
            lat=lat,
            lon=lon,
            demand_weight=demand_weight,
        )
    )
    nodes = [
        {"id": p[0], "role": role, "province": code, "lat": p[1], "lon": p[2]}
        for role, points in (
            (NodeRole.GATEWAY, [gateway]),
            (NodeRole.AGGREGATION, aggs),
            (NodeRole.ACCESS, accs),
        )
        for p in points
    ]
    inside = LinkLayer.PROVINCE
    ring = 1 if aggregation_nodes == 2 else aggregation_nodes
    links = [
        _link(aggs[i], aggs[(i + 1) % aggregation_nodes], inside, AGGREGATION_GBPS, region)
        for i in range(ring)
    ]
    links.append(_link(gateway, aggs[0], inside, AGGREGATION_GBPS, region))
    links.append(_link(gateway, aggs[1], inside, AGGREGATION_GBPS, region))
    for i, acc in enumerate(accs):
        links.append(_link(acc, gateway, LinkLayer.ACCESS, ACCESS_GBPS, region))
        links.append(_link(acc, aggs[i % aggregation_nodes], LinkLayer.ACCESS, ACCESS_GBPS, region))
    sites = []
    for j, kind in enumerate(site_kinds):
        point = _scatter(rng, f"{code}-{kind}-{j}", lat, lon, spread_deg)
        site, uplink = make_site(
            rng,
            site_id=point[0],
            name=f"{name} {kind} site {j}",
            province=code,
            kind=kind,
            lat=point[1],
            lon=point[2],
        )
        sites.append(site)
        links.append(_link(point, aggs[j % aggregation_nodes], inside, uplink, region))
        links.append(_link(point, aggs[(j + 1) % aggregation_nodes], inside, uplink, region))
    parts.nodes.extend(_NODES.validate_python(nodes))
    parts.sites.extend(_SITES.validate_python(sites))
    parts.links.extend(_LINKS.validate_python(links))


def backbone_link(a: Point, b: Point, bandwidth_gbps: float) -> Link:
    """A national backbone link between two gateways, priced by its great-circle length."""
    km = great_circle_km(a[1], a[2], b[1], b[2])
    link = _link(a, b, LinkLayer.BACKBONE, bandwidth_gbps, NATIONAL_OWNER)
    link["cost_per_gbps_hour"] = round(km * BACKBONE_CNY_PER_GBPS_HOUR_KM, 6)
    return Link.model_validate(link)


def _link(a: Point, b: Point, layer: LinkLayer, bandwidth_gbps: float, owner: str) -> Raw:
    latency = max(LATENCY_FLOOR_MS, round(fibre_latency_ms(a[1], a[2], b[1], b[2]), 4))
    return {
        "a": a[0],
        "b": b[0],
        "layer": layer,
        "bandwidth_gbps": bandwidth_gbps,
        "latency_ms": latency,
        "owner": owner,
    }


def _scatter(rng: random.Random, node_id: str, lat: float, lon: float, spread: float) -> Point:
    return (
        node_id,
        round(min(90.0, max(-90.0, lat + rng.uniform(-spread, spread))), 5),
        round(min(180.0, max(-180.0, lon + rng.uniform(-spread, spread))), 5),
    )


@dataclass(frozen=True, slots=True)
class _Profile:
    """How sites of one kind are drawn. Integer ranges are in units of their `*_unit`."""

    cores: tuple[int, int]
    core_unit: int
    models: tuple[str, ...]
    models_per_site: int
    accelerator_share: float
    accelerators: tuple[int, int]
    accelerator_unit: int
    interconnects: tuple[Interconnect, ...]
    pue: tuple[float, float]
    carbon: tuple[float, float]
    green: tuple[float, float]
    storage_tib: tuple[int, int]
    price_band: tuple[float, float]
    """Where in each price range this kind's prices fall (0 = cheapest, 1 = dearest)."""


_PROFILES: Final = {
    SiteKind.HUB: _Profile(
        cores=(64, 640),
        core_unit=64,
        models=("A100", "H800", "H100", "Ascend910B", "MLU370"),
        models_per_site=2,
        accelerator_share=1.0,
        accelerators=(16, 128),
        accelerator_unit=8,
        interconnects=(Interconnect.IB, Interconnect.ROCE),
        pue=(1.15, 1.25),
        carbon=(300.0, 500.0),
        green=(0.3, 0.7),
        storage_tib=(2048, 20480),
        price_band=(0.0, 0.4),
    ),
    SiteKind.PROVINCIAL: _Profile(
        cores=(16, 128),
        core_unit=64,
        models=("A100", "L40S", "T4"),
        models_per_site=1,
        accelerator_share=0.9,
        accelerators=(2, 16),
        accelerator_unit=8,
        interconnects=(Interconnect.ROCE, Interconnect.ETHERNET),
        pue=(1.3, 1.5),
        carbon=(450.0, 700.0),
        green=(0.1, 0.4),
        storage_tib=(100, 2000),
        price_band=(0.3, 0.8),
    ),
    SiteKind.EDGE: _Profile(
        cores=(4, 48),
        core_unit=16,
        models=("T4", "L40S"),
        models_per_site=1,
        accelerator_share=0.5,
        accelerators=(1, 8),
        accelerator_unit=1,
        interconnects=(Interconnect.ETHERNET,),
        pue=(1.4, 1.7),
        carbon=(500.0, 800.0),
        green=(0.0, 0.3),
        storage_tib=(10, 200),
        price_band=(0.5, 1.0),
    ),
    SiteKind.IDLE: _Profile(
        cores=(2, 32),
        core_unit=16,
        models=("V100", "T4"),
        models_per_site=1,
        accelerator_share=0.6,
        accelerators=(1, 16),
        accelerator_unit=1,
        interconnects=(Interconnect.ETHERNET,),
        pue=(1.5, 1.8),
        carbon=(550.0, 800.0),
        green=(0.0, 0.2),
        storage_tib=(5, 100),
        price_band=(0.2, 0.7),
    ),
}

_PRICE_RANGES: Final = {
    "A100": (8.0, 14.0),
    "H800": (18.0, 30.0),
    "H100": (18.0, 30.0),
    "Ascend910B": (7.0, 12.0),
    "MLU370": (4.0, 6.0),
    "L40S": (5.0, 8.0),
    "T4": (1.0, 2.0),
    "V100": (3.0, 5.0),
}
"""CNY per accelerator-hour."""
_CPU_CORE_PRICE: Final = (0.03, 0.12)
_MEMORY_GIB_PRICE: Final = (0.003, 0.01)
_STORAGE_GIB_PRICE: Final = (0.0001, 0.0003)


def make_site(
    rng: random.Random,
    *,
    site_id: str,
    name: str,
    province: str,
    kind: SiteKind,
    lat: float,
    lon: float,
) -> tuple[Raw, float]:
    """Draw a site of `kind` and return its raw document entry and its uplink speed in Gbps.

    Hubs: 4k-41k cores, two of A100/H800/H100/Ascend910B/MLU370 with 128-1024 each, IB or RoCE,
    PUE 1.15-1.25, the cheapest prices. Provincial: 1k-8k cores, mostly 16-128 of A100/L40S/T4.
    Edge and idle: small, a few T4/L40S (edge) or V100/T4 (idle) on half or more of them.
    Every accelerator model in the capacity has a price; 15% of sites are aarch64. The uplink is
    400 Gbps from 4,096 cores, 200 from 1,024, else 100.
    """
    profile = _PROFILES[kind]
    cores = profile.core_unit * rng.randint(*profile.cores)
    accelerators: dict[str, int] = {}
    if rng.random() < profile.accelerator_share:
        for model in rng.sample(profile.models, profile.models_per_site):
            accelerators[model] = profile.accelerator_unit * rng.randint(*profile.accelerators)
    band = rng.uniform(*profile.price_band)
    site = {
        "id": site_id,
        "name": name,
        "province": province,
        "kind": kind,
        "lat": lat,
        "lon": lon,
        "capacity": {
            "cpu_cores": cores,
            "memory_gib": cores * rng.choice((4, 8)),
            "accelerators": accelerators,
            "storage_gib": 1024 * rng.randint(*profile.storage_tib),
        },
        "cpu_arch": CpuArch.AARCH64 if rng.random() < 0.15 else CpuArch.X86_64,
        "interconnect": rng.choice(profile.interconnects),
        "prices": {
            "cpu_core_hour": _price(_CPU_CORE_PRICE, band, 4),
            "memory_gib_hour": _price(_MEMORY_GIB_PRICE, band, 5),
            "accelerator_hour": {m: _price(_PRICE_RANGES[m], band, 2) for m in accelerators},
            "storage_gib_hour": _price(_STORAGE_GIB_PRICE, band, 6),
        },
        "pue": round(rng.uniform(*profile.pue), 3),
        "carbon_g_per_kwh": round(rng.uniform(*profile.carbon), 1),
        "green_share": round(rng.uniform(*profile.green), 3),
    }
    uplink = 400.0 if cores >= 4096 else 200.0 if cores >= 1024 else 100.0
    return site, uplink


def _price(bounds: tuple[float, float], band: float, digits: int) -> float:
    low, high = bounds
    return round(low + band * (high - low), digits)


def _group_regions(lats: Sequence[float], lons: Sequence[float]) -> tuple[list[int], int]:
    """Region index of each province and the region count: provinces are cut into columns by
    longitude, each column sorted by latitude and cut into groups of 8."""
    n = len(lats)
    target = math.ceil(n / PROVINCES_PER_REGION)
    columns = max(1, round(math.sqrt(target)))
    per_column = PROVINCES_PER_REGION * math.ceil(target / columns)
    by_lon = sorted(range(n), key=lambda i: (lons[i], i))
    region_of = [0] * n
    count = 0
    for start in range(0, n, per_column):
        column = sorted(by_lon[start : start + per_column], key=lambda i: (lats[i], i))
        for first in range(0, len(column), PROVINCES_PER_REGION):
            for i in column[first : first + PROVINCES_PER_REGION]:
                region_of[i] = count
            count += 1
    return region_of, count


def _backbone_pairs(lats: Sequence[float], lons: Sequence[float]) -> list[tuple[int, int]]:
    """Index pairs (i < j) of the backbone: the spanning tree, then for each point in turn links
    to its two nearest points it is not yet joined to."""
    lat = np.asarray(lats, dtype=np.float64)
    lon = np.asarray(lons, dtype=np.float64)
    if len(lat) < 2:
        return []
    xy = np.column_stack((lon * math.cos(math.radians(float(lat.mean()))), lat))
    neighbours = nearest_neighbours(xy, _NEIGHBOURS)
    tree = spanning_tree(xy, neighbours)
    joined = set(tree)
    pairs = list(tree)
    for i, row in enumerate(neighbours.tolist()):
        extra = [p for p in ((min(i, j), max(i, j)) for j in row) if p not in joined][:2]
        joined.update(extra)
        pairs.extend(extra)
    return pairs


def nearest_neighbours(xy: FloatArray, k: int) -> IntArray:
    """Row i holds the indices of the min(k, n-1) points nearest to point i (never i itself),
    nearest first, by Euclidean distance. Exact.

    Small inputs are compared all against all; larger ones are bucketed in a grid of about two
    points per cell and searched in the 5x5 cells around each point, falling back to all against
    all for a point whose k-th candidate is not provably among the nearest.
    """
    n = len(xy)
    k = min(k, n - 1)
    if k <= 0:
        return np.empty((n, 0), dtype=np.intp)
    if n <= _BRUTE_FORCE_POINTS:
        return _nearest_brute(xy, np.arange(n), k)
    low = xy.min(axis=0)
    span = xy.max(axis=0) - low
    step = max(math.sqrt(float(span[0] * span[1]) * 2 / n), float(span.max()) / n, 1e-12)
    grid = np.floor((xy - low) / step).astype(np.intp)
    size_x, size_y = int(grid[:, 0].max()) + 1, int(grid[:, 1].max()) + 1
    cell = grid[:, 0] * size_y + grid[:, 1]
    order = np.argsort(cell, kind="stable")
    starts = np.searchsorted(cell[order], np.arange(size_x * size_y + 1))
    counts = np.diff(starts)
    slots = np.arange(int(counts.max()))
    offsets = [
        (dx, dy)
        for dx in range(-_GRID_RINGS, _GRID_RINGS + 1)
        for dy in range(-_GRID_RINGS, _GRID_RINGS + 1)
    ]
    radius2 = (_GRID_RINGS * step) ** 2
    result = np.empty((n, k), dtype=np.intp)
    unresolved: list[IntArray] = []
    chunk = max(1, 2**18 // (len(offsets) * len(slots)))
    for first in range(0, n, chunk):
        rows = np.arange(first, min(n, first + chunk))
        columns, masks = [], []
        for dx, dy in offsets:
            cx, cy = grid[rows, 0] + dx, grid[rows, 1] + dy
            inside = (cx >= 0) & (cx < size_x) & (cy >= 0) & (cy < size_y)
            at = np.where(inside, cx * size_y + cy, 0)
            columns.append(starts[at][:, None] + slots)
            masks.append(slots < np.where(inside, counts[at], 0)[:, None])
        candidates = order[np.minimum(np.concatenate(columns, axis=1), n - 1)]
        valid = np.concatenate(masks, axis=1) & (candidates != rows[:, None])
        if candidates.shape[1] < k:
            unresolved.append(rows)
            continue
        diff = xy[candidates] - xy[rows][:, None, :]
        dist2 = np.where(valid, np.einsum("ijk,ijk->ij", diff, diff), np.inf)
        picked, picked_dist2 = _k_smallest(dist2, k)
        ok = picked_dist2[:, -1] < radius2
        result[rows[ok]] = np.take_along_axis(candidates, picked, axis=1)[ok]
        unresolved.append(rows[~ok])
    rest = np.concatenate(unresolved) if unresolved else np.empty(0, dtype=np.intp)
    if len(rest):
        result[rest] = _nearest_brute(xy, rest, k)
    return result


def _nearest_brute(xy: FloatArray, rows: IntArray, k: int) -> IntArray:
    out = np.empty((len(rows), k), dtype=np.intp)
    chunk = max(1, 2**20 // len(xy))
    for first in range(0, len(rows), chunk):
        part = rows[first : first + chunk]
        diff = xy[None, :, :] - xy[part][:, None, :]
        dist2 = np.einsum("ijk,ijk->ij", diff, diff)
        dist2[np.arange(len(part)), part] = np.inf
        out[first : first + len(part)] = _k_smallest(dist2, k)[0]
    return out


def _k_smallest(dist2: FloatArray, k: int) -> tuple[IntArray, FloatArray]:
    """Column indices and values of the k smallest entries of each row, smallest first."""
    if k < dist2.shape[1]:
        picked = np.argpartition(dist2, k - 1, axis=1)[:, :k]
    else:
        picked = np.broadcast_to(np.arange(dist2.shape[1]), dist2.shape).copy()
    values = np.take_along_axis(dist2, picked, axis=1)
    order = np.argsort(values, axis=1, kind="stable")
    return np.take_along_axis(picked, order, axis=1), np.take_along_axis(values, order, axis=1)


def spanning_tree(xy: FloatArray, neighbours: IntArray) -> list[tuple[int, int]]:
    """A minimum spanning tree (pairs i < j) of the points, by Euclidean distance.

    Kruskal runs over the nearest-neighbour edges in `neighbours`; pieces left apart are then
    joined, smallest first, by the shortest edge leaving them (the cut property), so the result
    always spans every point.
    """
    n = len(xy)
    src = np.repeat(np.arange(n), neighbours.shape[1])
    dst = neighbours.ravel()
    pairs = np.unique(np.column_stack((np.minimum(src, dst), np.maximum(src, dst))), axis=0)
    length = np.hypot(*(xy[pairs[:, 0]] - xy[pairs[:, 1]]).T)
    order = np.lexsort((pairs[:, 1], pairs[:, 0], length))
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    tree: list[tuple[int, int]] = []
    for a, b in pairs[order].tolist():
        root_a, root_b = find(a), find(b)
        if root_a != root_b:
            parent[root_a] = root_b
            tree.append((a, b))
            if len(tree) == n - 1:
                return tree
    while len(tree) < n - 1:
        roots = np.fromiter((find(i) for i in range(n)), dtype=np.intp, count=n)
        labels, sizes = np.unique(roots, return_counts=True)
        members = np.flatnonzero(roots == labels[np.argmin(sizes)])
        a, b = _closest_pair(xy, members, np.flatnonzero(roots != roots[members[0]]))
        parent[find(a)] = find(b)
        tree.append((min(a, b), max(a, b)))
    return tree


def _closest_pair(xy: FloatArray, left: IntArray, right: IntArray) -> tuple[int, int]:
    """The closest (l, r) with l from `left` and r from `right`."""
    best = (math.inf, 0, 0)
    chunk = max(1, 2**20 // len(right))
    for first in range(0, len(left), chunk):
        part = left[first : first + chunk]
        diff = xy[right][None, :, :] - xy[part][:, None, :]
        dist2 = np.einsum("ijk,ijk->ij", diff, diff)
        i, j = np.unravel_index(int(np.argmin(dist2)), dist2.shape)
        if dist2[i, j] < best[0]:
            best = (float(dist2[i, j]), int(part[i]), int(right[j]))
    return best[1], best[2]
