"""The built-in map `china`: mainland China's 31 provinces on the Chinanet backbone.

Facts come from the shipped data files in `cnbrain/netmap/data/` (see docs/data-sources.md):

- `provinces.csv`: names, capitals and census-2020 population of the 31 provinces;
- `chinanet_backbone.json`: the China Telecom backbone PoPs and links, derived from the Internet
  Topology Zoo;
- `hubs.csv`: the ten data-centre clusters of the eight national hubs (东数西算).

Everything else (regions, intra-province topology, site capacities, prices, PUE of non-hub
sites, grid carbon intensity, link bandwidth and cost) is a stated assumption, set by the
constants below and documented in docs/data-sources.md.
"""

import csv
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from types import MappingProxyType
from typing import Any, Final

from cnbrain.domain.enums import CpuArch, Interconnect, LinkLayer, NodeRole, SiteKind
from cnbrain.domain.network import NATIONAL_OWNER, Link, Node, Province, Region
from cnbrain.domain.site import Capacity, NodePool, Prices, Site
from cnbrain.netmap.document import MapDocument
from cnbrain.netmap.geo import fibre_latency_ms, great_circle_km

REGIONS: Final[tuple[tuple[str, str, tuple[str, ...]], ...]] = (
    ("north", "North and Northeast China", ("BJ", "TJ", "HE", "SX", "NM", "LN", "JL", "HL")),
    ("east", "East China", ("SH", "JS", "ZJ", "AH", "FJ", "JX", "SD")),
    ("south", "Central and South China", ("HA", "HB", "HN", "GD", "GX", "HI")),
    (
        "west",
        "Southwest and Northwest China",
        ("CQ", "SC", "GZ", "YN", "XZ", "SN", "GS", "QH", "NX", "XJ"),
    ),
)
"""(region id, name, province codes): the four regional brains and the provinces each owns."""

GRID_CARBON_G_PER_KWH: Final[Mapping[str, float]] = MappingProxyType(
    {
        "BJ": 560, "TJ": 750, "HE": 730, "SX": 760, "NM": 700, "LN": 620, "JL": 560, "HL": 640,
        "SH": 590, "JS": 640, "ZJ": 530, "AH": 700, "FJ": 460, "JX": 600, "SD": 720,
        "HA": 680, "HB": 380, "HN": 500, "GD": 470, "GX": 420, "HI": 430,
        "CQ": 480, "SC": 110, "GZ": 380, "YN": 100, "XZ": 60, "SN": 680, "GS": 420, "QH": 130,
        "NX": 650, "XJ": 620,
    }
)  # fmt: skip
"""Assumed average grid carbon intensity per province, g CO2 per kWh (not a published factor).
A site's own value is this times (1 - its green_share)."""

BACKBONE_GBPS_BY_COLOUR: Final[Mapping[str, float]] = MappingProxyType(
    {"Blue": 800.0, "Red": 400.0}
)
"""Assumed backbone capacity by Chinanet link colour; Chinanet itself gives no capacities.
Blue marks the Beijing-Shanghai-Guangzhou trunk triangle, taken as the core."""
BACKBONE_DEFAULT_GBPS: Final = 400.0
BACKBONE_COST_PER_GBPS_HOUR_PER_1000_KM: Final = 0.02
"""Assumed backbone price in CNY per reserved Gbps-hour per 1000 km of great-circle distance."""
BACKBONE_MIN_COST_PER_GBPS_HOUR: Final = 0.005

PROVINCE_CORE_GBPS: Final = 400.0
"""Gateway-aggregation and aggregation-aggregation links."""
ACCESS_LINK_GBPS: Final = 100.0
PROVINCE_LINK_COST_PER_GBPS_HOUR: Final = 0.002
ACCESS_LINK_COST_PER_GBPS_HOUR: Final = 0.001
MIN_INTRA_PROVINCE_LATENCY_MS: Final = 0.05

ACCESS_NODES_BY_POPULATION: Final[tuple[tuple[float, int], ...]] = ((60.0, 3), (35.0, 2))
"""(minimum population in millions, access nodes): first match wins; smaller provinces get 1."""
TWO_DC_MIN_POPULATION_M: Final = 40.0
TWO_DC_ALWAYS: Final = frozenset({"BJ", "SH"})
EDGE_MIN_POPULATION_M: Final = 8.0
IDLE_SITE_PROVINCES: Final = 10
"""Idle-compute (社会泛在算力) sites are placed in this many of the most populous provinces."""

BASE_ACCELERATOR_PRICE: Final[Mapping[str, float]] = MappingProxyType(
    {
        "A100": 14.0, "A800": 13.0, "H100": 30.0, "H800": 28.0, "H20": 10.0, "L40S": 8.0,
        "V100": 6.0, "T4": 2.5, "Ascend910B": 12.0, "Ascend310P": 1.8, "MLU370": 5.0,
        "MLU590": 9.0,
    }
)  # fmt: skip
"""Assumed reference price in CNY per accelerator-hour; a site multiplies it by its price factor."""
BASE_CPU_CORE_HOUR: Final = 0.08
BASE_MEMORY_GIB_HOUR: Final = 0.01
BASE_STORAGE_GIB_HOUR: Final = 0.0002

REGION_PRICE_FACTOR: Final[Mapping[str, float]] = MappingProxyType(
    {"north": 1.0, "east": 1.08, "south": 1.02, "west": 0.9}
)
KIND_PRICE_FACTOR: Final[Mapping[SiteKind, float]] = MappingProxyType(
    {SiteKind.PROVINCIAL: 1.1, SiteKind.EDGE: 1.3, SiteKind.IDLE: 0.8}
)
KIND_PUE: Final[Mapping[SiteKind, float]] = MappingProxyType(
    {SiteKind.PROVINCIAL: 1.35, SiteKind.EDGE: 1.5, SiteKind.IDLE: 1.7}
)
REGION_PUE_DELTA: Final[Mapping[str, float]] = MappingProxyType(
    {"north": -0.05, "east": 0.0, "south": 0.05, "west": -0.03}
)
KIND_GREEN_SHARE: Final[Mapping[SiteKind, float]] = MappingProxyType(
    {SiteKind.PROVINCIAL: 0.15, SiteKind.EDGE: 0.05, SiteKind.IDLE: 0.0}
)

HUB_GIB_PER_CORE: Final = 8
HUB_UPLINK_GBPS: Final = 400.0
"""Each hub site's two uplinks; other sites get 100 or 200 Gbps by size (400 for the largest)."""

_GIB_PER_PIB: Final = 1024 * 1024
_KM_PER_DEGREE: Final = 111.2


@dataclass(frozen=True, slots=True)
class _HubSpec:
    """Assumed build-out of one hub cluster's site."""

    accelerators: Mapping[str, int]
    cpu_cores: int
    storage_pib: float
    interconnect: Interconnect
    cpu_arch: CpuArch
    pue: float
    price_factor: float
    green_share: float


_IB, _ROCE, _ETH = Interconnect.IB, Interconnect.ROCE, Interconnect.ETHERNET
_X86, _ARM = CpuArch.X86_64, CpuArch.AARCH64

HUB_SPECS: Final[Mapping[str, _HubSpec]] = MappingProxyType(
    {
        "zhangjiakou": _HubSpec(
            accelerators={"A100": 1024, "H800": 512, "H100": 256},
            cpu_cores=48_000, storage_pib=60, interconnect=_IB, cpu_arch=_X86,
            pue=1.25, price_factor=1.0, green_share=0.35,
        ),
        "qingpu": _HubSpec(
            accelerators={"H100": 1024, "H800": 768, "A100": 512, "L40S": 512},
            cpu_cores=40_000, storage_pib=50, interconnect=_IB, cpu_arch=_X86,
            pue=1.25, price_factor=1.05, green_share=0.2,
        ),
        "wuhu": _HubSpec(
            accelerators={"Ascend910B": 1536, "MLU370": 512},
            cpu_cores=32_000, storage_pib=40, interconnect=_ROCE, cpu_arch=_ARM,
            pue=1.25, price_factor=0.98, green_share=0.2,
        ),
        "shaoguan": _HubSpec(
            accelerators={"A100": 768, "H800": 512, "L40S": 512, "Ascend910B": 512},
            cpu_cores=36_000, storage_pib=45, interconnect=_IB, cpu_arch=_X86,
            pue=1.25, price_factor=1.0, green_share=0.25,
        ),
        "tianfu": _HubSpec(
            accelerators={"A100": 768, "Ascend910B": 1024, "MLU370": 256},
            cpu_cores=30_000, storage_pib=40, interconnect=_ROCE, cpu_arch=_X86,
            pue=1.25, price_factor=0.92, green_share=0.5,
        ),
        "chongqing": _HubSpec(
            accelerators={"A100": 512, "H800": 256, "MLU370": 384, "L40S": 256},
            cpu_cores=24_000, storage_pib=30, interconnect=_IB, cpu_arch=_X86,
            pue=1.25, price_factor=0.95, green_share=0.3,
        ),
        "horinger": _HubSpec(
            accelerators={"A100": 1536, "H800": 1024, "Ascend910B": 1536},
            cpu_cores=40_000, storage_pib=80, interconnect=_IB, cpu_arch=_X86,
            pue=1.15, price_factor=0.72, green_share=0.55,
        ),
        "guian": _HubSpec(
            accelerators={"Ascend910B": 3072, "MLU370": 512},
            cpu_cores=36_000, storage_pib=70, interconnect=_ROCE, cpu_arch=_ARM,
            pue=1.18, price_factor=0.74, green_share=0.5,
        ),
        "qingyang": _HubSpec(
            accelerators={"Ascend910B": 2048, "A100": 768, "H800": 512},
            cpu_cores=30_000, storage_pib=60, interconnect=_IB, cpu_arch=_X86,
            pue=1.2, price_factor=0.75, green_share=0.5,
        ),
        "zhongwei": _HubSpec(
            accelerators={"A100": 1280, "H800": 768, "Ascend910B": 1024, "MLU370": 256},
            cpu_cores=36_000, storage_pib=70, interconnect=_IB, cpu_arch=_X86,
            pue=1.15, price_factor=0.72, green_share=0.6,
        ),
    }
)  # fmt: skip
"""Assumed capacity, interconnect, CPU architecture, PUE, price factor and green-power share of
each hub cluster's site, keyed by the `slug` column of hubs.csv."""

_ATTRIBUTION: Final = (
    "Backbone derived from the Internet Topology Zoo, Chinanet (China Telecom, 2010): "
    'S. Knight, H. X. Nguyen, N. Falkner, R. Bowden, M. Roughan, "The Internet Topology Zoo", '
    "IEEE Journal on Selected Areas in Communications 29(9):1765-1775, 2011; licensed CC BY 4.0. "
    "Population: National Bureau of Statistics of China, Seventh National Population Census 2020. "
    "Hub clusters: NDRC/CAC/MIIT/NEA approvals of the eight national hub nodes and ten data-centre "
    "clusters (2021-2022), as compiled in docs/data-sources.md. "
    "Capacities, prices, carbon intensities and non-hub PUE values are assumptions."
)
_DESCRIPTION: Final = (
    "Mainland China: 31 provinces under four regional brains, the Chinanet backbone between "
    "province gateways, two aggregation and one to three access nodes per province, the ten "
    "national hub clusters and provincial, edge and idle-compute sites."
)


@dataclass(frozen=True, slots=True)
class _ProvinceRow:
    code: str
    name: str
    name_zh: str
    capital: str
    population_m: float


@dataclass(frozen=True, slots=True)
class _Pop:
    label: str
    province: str
    lat: float
    lon: float


@dataclass(frozen=True, slots=True)
class _HubRow:
    slug: str
    province: str
    hub_en: str
    zone: str
    cluster_en: str
    lat: float
    lon: float
    pue_target: float


@functools.cache
def china_document() -> MapDocument:
    """The built-in map `china`.

    Deterministic: built only from the shipped data files and the constants of this module, so
    every call returns an equal document (the same cached object within a process).
    """
    rows = _read_provinces()
    pops, edges = _read_backbone()
    hubs = _read_hubs()
    region_of = {code: region for region, _, codes in REGIONS for code in codes}
    total_population = sum(r.population_m for r in rows)
    rank = {r.code: i for i, r in enumerate(sorted(rows, key=lambda r: -r.population_m))}
    pop_ids = _pop_ids(rows, pops)
    pop_by_label = {p.label: p for p in pops}

    provinces: list[Province] = []
    nodes: list[Node] = []
    sites: list[Site] = []
    links: list[Link] = [_backbone_link(pop_by_label, pop_ids, *edge) for edge in edges]
    for index, row in enumerate(rows):
        region = region_of[row.code]
        capital = pop_by_label[row.capital]
        gateway = _node(
            pop_ids[capital.label], NodeRole.GATEWAY, row.code, capital.lat, capital.lon
        )
        nodes.append(gateway)
        nodes.extend(
            _node(pop_ids[p.label], NodeRole.BACKBONE, row.code, p.lat, p.lon)
            for p in pops
            if p.province == row.code and p.label != row.capital
        )
        aggs = (
            _node(f"{row.code}-agg-1", NodeRole.AGGREGATION, row.code, *_near(capital, 5, 45)),
            _node(f"{row.code}-agg-2", NodeRole.AGGREGATION, row.code, *_near(capital, 5, 225)),
        )
        nodes.extend(aggs)
        links.extend(
            _province_link(a, b, LinkLayer.PROVINCE, PROVINCE_CORE_GBPS, region)
            for a, b in ((gateway, aggs[0]), (gateway, aggs[1]), (aggs[0], aggs[1]))
        )
        accesses = tuple(
            _node(
                f"{row.code}-acc-{k}", NodeRole.ACCESS, row.code, *_near(capital, 25, 120 * (k - 1))
            )
            for k in range(1, _access_count(row.population_m) + 1)
        )
        nodes.extend(accesses)
        for k, access in enumerate(accesses):
            links.append(
                _province_link(access, gateway, LinkLayer.ACCESS, ACCESS_LINK_GBPS, region)
            )
            links.append(
                _province_link(access, aggs[k % 2], LinkLayer.ACCESS, ACCESS_LINK_GBPS, region)
            )
        province_sites = [
            *(_hub_site(hub) for hub in hubs if hub.province == row.code),
            *(
                (_site(row, region, capital, plan), plan.uplink_gbps)
                for plan in _site_plans(row, index, rank[row.code])
            ),
        ]
        for site, gbps in province_sites:
            sites.append(site)
            links.extend(
                _province_link(site, agg, LinkLayer.PROVINCE, gbps, region) for agg in aggs
            )
        provinces.append(
            Province(
                code=row.code,
                name=row.name,
                name_zh=row.name_zh,
                region=region,
                gateway=gateway.id,
                access_nodes=tuple(a.id for a in accesses),
                lat=capital.lat,
                lon=capital.lon,
                demand_weight=round(row.population_m / total_population, 6),
            )
        )
    return MapDocument(
        name="china",
        description=_DESCRIPTION,
        attribution=_ATTRIBUTION,
        regions=tuple(Region(id=rid, name=name) for rid, name, _ in REGIONS),
        provinces=tuple(provinces),
        nodes=tuple(nodes),
        sites=tuple(sites),
        links=tuple(links),
    )


def _data_text(name: str) -> str:
    return (files("cnbrain.netmap") / "data" / name).read_text(encoding="utf-8")


def _read_csv(name: str) -> list[dict[str, str]]:
    """Rows of a shipped CSV file whose leading `#` lines are comments."""
    lines = [line for line in _data_text(name).splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines))


def _read_provinces() -> list[_ProvinceRow]:
    return [
        _ProvinceRow(r["code"], r["name"], r["name_zh"], r["capital"], float(r["population_m"]))
        for r in _read_csv("provinces.csv")
    ]


def _read_backbone() -> tuple[list[_Pop], list[tuple[str, str, str]]]:
    """PoPs and (label, label, colour) edges of chinanet_backbone.json."""
    raw: dict[str, Any] = json.loads(_data_text("chinanet_backbone.json"))
    pops = [
        _Pop(str(n["label"]), str(n["province"]), float(n["lat"]), float(n["lon"]))
        for n in raw["nodes"]
    ]
    edges = [(str(e["a"]), str(e["b"]), str(e["colour"])) for e in raw["edges"]]
    return pops, edges


def _read_hubs() -> list[_HubRow]:
    return [
        _HubRow(
            slug=r["slug"],
            province=r["province"],
            hub_en=r["hub_en"],
            zone=r["zone"],
            cluster_en=r["cluster_en"],
            lat=float(r["lat"]),
            lon=float(r["lon"]),
            pue_target=float(r["pue_target"]),
        )
        for r in _read_csv("hubs.csv")
    ]


def _pop_ids(rows: list[_ProvinceRow], pops: list[_Pop]) -> dict[str, str]:
    """Node id of every PoP: `<CODE>-gw` for a province's capital, else `<CODE>-bb-<city>`."""
    capitals = {r.capital for r in rows}
    return {
        p.label: (
            f"{p.province}-gw"
            if p.label in capitals
            else f"{p.province}-bb-{''.join(c for c in p.label.lower() if c.isalnum())}"
        )
        for p in pops
    }


def _node(node_id: str, role: NodeRole, province: str, lat: float, lon: float) -> Node:
    return Node(id=node_id, role=role, province=province, lat=lat, lon=lon)


def _near(origin: _Pop, km: float, bearing_deg: float) -> tuple[float, float]:
    """The point `km` away from `origin` on `bearing_deg` (flat-earth offset, 5 decimals)."""
    bearing = math.radians(bearing_deg)
    dlat = km * math.cos(bearing) / _KM_PER_DEGREE
    dlon = km * math.sin(bearing) / (_KM_PER_DEGREE * math.cos(math.radians(origin.lat)))
    return round(origin.lat + dlat, 5), round(origin.lon + dlon, 5)


def _backbone_link(
    pops: Mapping[str, _Pop], pop_ids: Mapping[str, str], a: str, b: str, colour: str
) -> Link:
    pa, pb = pops[a], pops[b]
    km = great_circle_km(pa.lat, pa.lon, pb.lat, pb.lon)
    cost = BACKBONE_COST_PER_GBPS_HOUR_PER_1000_KM * km / 1000.0
    return Link(
        a=pop_ids[a],
        b=pop_ids[b],
        layer=LinkLayer.BACKBONE,
        bandwidth_gbps=BACKBONE_GBPS_BY_COLOUR.get(colour, BACKBONE_DEFAULT_GBPS),
        latency_ms=round(fibre_latency_ms(pa.lat, pa.lon, pb.lat, pb.lon), 3),
        cost_per_gbps_hour=round(max(BACKBONE_MIN_COST_PER_GBPS_HOUR, cost), 4),
        owner=NATIONAL_OWNER,
    )


def _province_link(
    a: Node | Site, b: Node | Site, layer: LinkLayer, gbps: float, region: str
) -> Link:
    """An access or province link owned by `region`; latency from distance, at least the
    intra-province floor."""
    latency = max(MIN_INTRA_PROVINCE_LATENCY_MS, fibre_latency_ms(a.lat, a.lon, b.lat, b.lon))
    cost = (
        ACCESS_LINK_COST_PER_GBPS_HOUR
        if layer is LinkLayer.ACCESS
        else PROVINCE_LINK_COST_PER_GBPS_HOUR
    )
    return Link(
        a=a.id,
        b=b.id,
        layer=layer,
        bandwidth_gbps=gbps,
        latency_ms=round(latency, 3),
        cost_per_gbps_hour=cost,
        owner=region,
    )


def _access_count(population_m: float) -> int:
    for threshold, count in ACCESS_NODES_BY_POPULATION:
        if population_m >= threshold:
            return count
    return 1


def _prices(factor: float, accelerators: Mapping[str, int]) -> Prices:
    return Prices(
        cpu_core_hour=round(BASE_CPU_CORE_HOUR * factor, 4),
        memory_gib_hour=round(BASE_MEMORY_GIB_HOUR * factor, 5),
        accelerator_hour={m: round(BASE_ACCELERATOR_PRICE[m] * factor, 2) for m in accelerators},
        storage_gib_hour=round(BASE_STORAGE_GIB_HOUR * factor, 6),
    )


def _carbon(province: str, green_share: float) -> float:
    return round(GRID_CARBON_G_PER_KWH[province] * (1.0 - green_share))


def _hub_site(hub: _HubRow) -> tuple[Site, float]:
    """The site of one hub cluster and the bandwidth of its two uplinks."""
    spec = HUB_SPECS[hub.slug]
    capacity = Capacity(
        cpu_cores=spec.cpu_cores,
        memory_gib=spec.cpu_cores * HUB_GIB_PER_CORE,
        accelerators=dict(spec.accelerators),
        storage_gib=spec.storage_pib * _GIB_PER_PIB,
    )
    site = Site(
        id=f"{hub.province}-hub-{hub.slug}",
        name=f"{hub.cluster_en} cluster ({hub.hub_en} hub)",
        province=hub.province,
        kind=SiteKind.HUB,
        lat=hub.lat,
        lon=hub.lon,
        capacity=capacity,
        node_pools=_node_pools(capacity),
        cpu_arch=spec.cpu_arch,
        interconnect=spec.interconnect,
        prices=_prices(spec.price_factor, spec.accelerators),
        pue=spec.pue,
        carbon_g_per_kwh=_carbon(hub.province, spec.green_share),
        green_share=spec.green_share,
        labels={
            "hub": hub.hub_en,
            "cluster": hub.cluster_en,
            "hub_zone": hub.zone,
            "pue_target": f"{hub.pue_target:g}",
            "tier": "national-hub",
        },
    )
    return site, HUB_UPLINK_GBPS


ACCELERATORS_PER_NODE: Final = 8
"""Accelerators of one assumed accelerator server (fewer when a model's count is not a
multiple of it)."""
MAX_CORES_PER_ACCELERATOR: Final = 16
CPU_NODE_CORES: Final = 128


def _node_pools(capacity: Capacity) -> tuple[NodePool, ...]:
    """The assumed servers of a site: per accelerator model, servers of 8 (else 4, 2 or 1)
    accelerators with up to 16 cores each (fewer, and even, where the site has fewer cores
    per accelerator); the remaining cores as 128-core CPU servers. Memory follows the site's
    GiB per core."""
    devices = sum(capacity.accelerators.values())
    gib_per_core = capacity.memory_gib / capacity.cpu_cores
    per_accelerator = (
        min(MAX_CORES_PER_ACCELERATOR, 2 * int(capacity.cpu_cores / devices / 2)) if devices else 0
    )
    pools: list[NodePool] = []
    used = 0
    for model, count in sorted(capacity.accelerators.items()):
        size = next(n for n in ACCELERATOR_PER_NODE_SIZES if count % n == 0)
        cores = size * per_accelerator
        pools.append(
            NodePool(
                name=model.lower(),
                count=count // size,
                cpu_cores=cores,
                memory_gib=cores * gib_per_core,
                accelerator=model,
                accelerators=size,
            )
        )
        used += count // size * cores
    cpu_nodes = int(capacity.cpu_cores - used) // CPU_NODE_CORES
    if cpu_nodes:
        pools.append(
            NodePool(
                name="cpu",
                count=cpu_nodes,
                cpu_cores=CPU_NODE_CORES,
                memory_gib=CPU_NODE_CORES * gib_per_core,
            )
        )
    return tuple(pools)


ACCELERATOR_PER_NODE_SIZES: Final = (ACCELERATORS_PER_NODE, 4, 2, 1)


def _units(count: float) -> int:
    """`count` rounded to a whole number of 8-accelerator servers, at least one."""
    return max(8, 8 * round(count / 8))


@dataclass(frozen=True, slots=True)
class _SitePlan:
    """Assumed build-out of one non-hub site, placed `km` away from the capital on `bearing`."""

    kind: SiteKind
    suffix: str
    km: float
    bearing: float
    cpu_cores: int
    gib_per_core: int
    accelerators: Mapping[str, int]
    storage_pib: float
    interconnect: Interconnect
    uplink_gbps: float


def _site_plans(row: _ProvinceRow, index: int, rank: int) -> list[_SitePlan]:
    """Provincial data centres, edge and idle-compute sites of one province.

    `index` (position in provinces.csv) and `rank` (position by population, 0 = most
    populous) only vary the assumed build-out between provinces.
    """
    scale = min(2.5, max(0.5, row.population_m / 40.0))
    dc1_options: tuple[tuple[dict[str, int], Interconnect], ...] = (
        ({"A100": _units(64 * scale), "T4": 32}, _ROCE),
        ({"L40S": _units(48 * scale), "T4": 32}, _ROCE),
        ({"H20": _units(48 * scale), "T4": 16}, _ROCE),
        ({"T4": _units(64 * scale)}, _ETH),
    )
    dc1, dc1_interconnect = dc1_options[index % len(dc1_options)]
    plans = [
        _SitePlan(
            kind=SiteKind.PROVINCIAL, suffix="dc-1", km=15, bearing=60,
            cpu_cores=100 * round(40 * scale), gib_per_core=8, accelerators=dc1,
            storage_pib=scale, interconnect=dc1_interconnect,
            uplink_gbps=400.0 if scale >= 1.5 else 200.0,
        )
    ]  # fmt: skip
    if row.population_m >= TWO_DC_MIN_POPULATION_M or row.code in TWO_DC_ALWAYS:
        plans.append(
            _SitePlan(
                kind=SiteKind.PROVINCIAL, suffix="dc-2", km=20, bearing=200,
                cpu_cores=100 * round(30 * scale), gib_per_core=4,
                accelerators={"T4": 32} if index % 2 == 0 else {"Ascend310P": 32},
                storage_pib=0.5 * scale, interconnect=_ETH, uplink_gbps=200.0,
            )
        )  # fmt: skip
    if row.population_m >= EDGE_MIN_POPULATION_M:
        plans.append(
            _SitePlan(
                kind=SiteKind.EDGE, suffix="edge-1", km=22, bearing=8,
                cpu_cores=384, gib_per_core=4,
                accelerators={"T4": 16} if index % 2 == 0 else {"L40S": 8},
                storage_pib=0.05, interconnect=_ETH, uplink_gbps=100.0,
            )
        )  # fmt: skip
    if rank < IDLE_SITE_PROVINCES:
        plans.append(
            _SitePlan(
                kind=SiteKind.IDLE, suffix="idle-1", km=30, bearing=300,
                cpu_cores=1200, gib_per_core=4,
                accelerators={"V100": 32, "T4": 16} if index % 2 == 0 else {"V100": 16, "T4": 32},
                storage_pib=0.1, interconnect=_ETH, uplink_gbps=100.0,
            )
        )  # fmt: skip
    return plans


_KIND_NAME: Final[Mapping[SiteKind, str]] = MappingProxyType(
    {
        SiteKind.PROVINCIAL: "provincial data centre",
        SiteKind.EDGE: "edge site",
        SiteKind.IDLE: "idle-compute pool",
    }
)


def _site(row: _ProvinceRow, region: str, capital: _Pop, plan: _SitePlan) -> Site:
    """The non-hub site of `plan`, priced and rated by its region and kind."""
    green = KIND_GREEN_SHARE[plan.kind]
    lat, lon = _near(capital, plan.km, plan.bearing)
    labels = {"tier": str(plan.kind)} | ({"owner": "social"} if plan.kind is SiteKind.IDLE else {})
    capacity = Capacity(
        cpu_cores=plan.cpu_cores,
        memory_gib=plan.cpu_cores * plan.gib_per_core,
        accelerators=dict(plan.accelerators),
        storage_gib=round(plan.storage_pib * _GIB_PER_PIB),
    )
    return Site(
        id=f"{row.code}-{plan.suffix}",
        name=f"{row.name} {_KIND_NAME[plan.kind]} {plan.suffix.rsplit('-', 1)[1]}",
        province=row.code,
        kind=plan.kind,
        lat=lat,
        lon=lon,
        capacity=capacity,
        node_pools=_node_pools(capacity),
        cpu_arch=CpuArch.X86_64,
        interconnect=plan.interconnect,
        prices=_prices(
            REGION_PRICE_FACTOR[region] * KIND_PRICE_FACTOR[plan.kind], plan.accelerators
        ),
        pue=round(KIND_PUE[plan.kind] + REGION_PUE_DELTA[region], 2),
        carbon_g_per_kwh=_carbon(row.code, green),
        green_share=green,
        labels=labels,
    )
