"""The JSON the console's pages read from `/console/api/...`: who is looking, and the map
with its load."""

from typing import Literal

from pydantic import BaseModel, Field

Brain = Literal["regional", "national"]
Page = Literal["map", "queue", "requests", "tenants"]


class Viewer(BaseModel):
    """The caller, as its API key says. Staff (operators, admins) see load; tenant roles
    see their own tenant's requests and usage, and the map's layout without its load."""

    user: str
    role: str
    tenant: str | None
    staff: bool


class ConsoleInfo(BaseModel):
    """What this brain's console shows to the caller."""

    brain: Brain
    region: str | None = Field(description="The region the brain owns; None: all of the map.")
    map: str
    viewer: Viewer
    pages: list[Page]


class AcceleratorLoad(BaseModel):
    model: str
    free: float = Field(description="Accelerators free now.")
    total: float


class RegionMark(BaseModel):
    id: str
    name: str
    owned: bool = Field(description="Whether the brain serving the console owns it.")
    registered: bool | None = Field(
        default=None, description="National brain: whether the region's brain registered."
    )
    summary_age_s: float | None = Field(
        default=None, description="National brain: age of the region's latest summary."
    )
    accelerators: list[AcceleratorLoad] | None = Field(
        default=None, description="National brain: the region's accelerators, from its summary."
    )


class ProvinceMark(BaseModel):
    code: str
    name: str
    name_zh: str
    region: str
    lat: float
    lon: float
    owned: bool
    gateway_utilisation: float | None = Field(
        default=None,
        description="National brain: the highest load of the links at the province's "
        "gateway, from its region's summary.",
    )


class NodeMark(BaseModel):
    id: str
    role: str
    province: str
    lat: float
    lon: float


class SiteMark(BaseModel):
    id: str
    name: str
    province: str
    kind: str
    lat: float
    lon: float
    owned: bool
    utilisation: float | None = Field(
        description="The highest share of any of its resources in use (0..1); None: unknown "
        "here (another brain's site, or a viewer who may not see load)."
    )


class LinkMark(BaseModel):
    id: str
    a: str
    b: str
    layer: str
    owner: str
    bandwidth_gbps: float
    owned: bool
    utilisation: float | None = Field(
        description="The share of its bandwidth reserved (0..1); None: unknown here."
    )


class MapView(BaseModel):
    """The map as the brain sees it now: every province, node, site and link of its map at
    their coordinates, with the load of what the brain owns when the viewer may see it."""

    name: str
    attribution: str
    owner: str | None = Field(description="What the brain owns: a region, 'national', or None.")
    load_visible: bool
    load_note: str = Field(description="Where the load shown comes from.")
    regions: list[RegionMark]
    provinces: list[ProvinceMark]
    nodes: list[NodeMark]
    sites: list[SiteMark]
    links: list[LinkMark]
