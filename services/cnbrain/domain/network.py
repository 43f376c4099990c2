"""The network side of the map: regions, provinces, network nodes and links."""

from pydantic import Field

from cnbrain.domain import bounds
from cnbrain.domain.bounds import Name
from cnbrain.domain.enums import LinkLayer, NodeRole
from cnbrain.domain.model import DomainModel

NATIONAL_OWNER = "national"
"""Owner of every backbone link: the national brain."""


class Region(DomainModel):
    """A group of provinces under one regional brain."""

    id: str = Field(min_length=1)
    name: str = ""


class Province(DomainModel):
    """A provincial-level division: its backbone gateway and the access nodes users attach to."""

    code: str = Field(min_length=1, description="Short code, for example BJ or GZ.")
    name: str
    name_zh: str = ""
    region: str = Field(description="Id of the region whose brain owns this province.")
    gateway: str = Field(description="Node id of the province's backbone gateway.")
    access_nodes: tuple[str, ...] = Field(
        description="Node ids where users attach; the first is the default."
    )
    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)
    demand_weight: float = Field(
        default=1.0, ge=0, le=bounds.MAX_WEIGHT, description="Relative share of demand from here."
    )


class Node(DomainModel):
    """A network node that is not a site: gateway, backbone PoP, aggregation or access router."""

    id: Name = Field(min_length=1)
    role: NodeRole
    province: Name
    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)


class Link(DomainModel):
    """An undirected link with one bandwidth pool shared by both directions."""

    a: Name = Field(min_length=1)
    b: Name = Field(min_length=1)
    layer: LinkLayer
    bandwidth_gbps: float = Field(gt=0, le=bounds.MAX_BANDWIDTH_GBPS, allow_inf_nan=False)
    latency_ms: float = Field(ge=0, le=bounds.MAX_LATENCY_MS, allow_inf_nan=False)
    cost_per_gbps_hour: float = Field(
        default=0.0,
        ge=0,
        le=bounds.MAX_PRICE_CNY,
        allow_inf_nan=False,
        description="CNY per reserved Gbps-hour.",
    )
    owner: Name = Field(
        default="", description="Region id, or 'national' for the backbone; derived when empty."
    )

    @property
    def id(self) -> str:
        return f"{self.a}--{self.b}"
