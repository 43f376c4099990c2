"""Data-center sites: capacity vector, prices, energy, labels and the cluster scheduler."""

from typing import Annotated, Self

from pydantic import Field, field_validator, model_validator

from cnbrain.domain import bounds
from cnbrain.domain.backend_ref import SIMULATOR, BackendRef
from cnbrain.domain.bounds import Name
from cnbrain.domain.enums import CpuArch, Interconnect, SiteKind
from cnbrain.domain.model import DomainModel

AcceleratorCount = Annotated[int, Field(le=bounds.MAX_ACCELERATORS)]
"""Accelerators of one model at a site (a negative count is refused by the map's checks)."""
Price = Annotated[float, Field(ge=0, le=bounds.MAX_PRICE_CNY, allow_inf_nan=False)]


class Capacity(DomainModel):
    """A capacity vector. Accelerators are counted per model name from the catalog.

    Bounded by one site's maximum (`cnbrain.domain.bounds`)."""

    cpu_cores: float = Field(ge=0, le=bounds.MAX_CPU_CORES, allow_inf_nan=False)
    memory_gib: float = Field(ge=0, le=bounds.MAX_MEMORY_GIB, allow_inf_nan=False)
    accelerators: dict[Name, AcceleratorCount] = Field(default_factory=dict)
    storage_gib: float = Field(default=0.0, ge=0, le=bounds.MAX_STORAGE_GIB, allow_inf_nan=False)


class NodePool(DomainModel):
    """`count` nodes of one shape on one interconnect fabric: each with `cpu_cores` cores,
    `memory_gib` and `accelerators` devices of model `accelerator` (none: a CPU pool). A gang
    runs on the nodes of one pool; the site's own scheduler knows which node is which."""

    name: Name = Field(min_length=1)
    count: int = Field(strict=True, ge=1, le=bounds.MAX_NODES, description="Nodes of the pool.")
    cpu_cores: float = Field(gt=0, le=bounds.MAX_CPU_CORES, allow_inf_nan=False)
    memory_gib: float = Field(gt=0, le=bounds.MAX_MEMORY_GIB, allow_inf_nan=False)
    accelerator: Name | None = Field(default=None, min_length=1, description="Catalog model.")
    accelerators: int = Field(
        default=0,
        strict=True,
        ge=0,
        le=bounds.MAX_DEVICES_PER_NODE,
        description="Accelerators on each node.",
    )

    @model_validator(mode="after")
    def _model_with_devices(self) -> Self:
        if (self.accelerator is None) != (self.accelerators == 0):
            raise ValueError("a pool names an accelerator model exactly when it has accelerators")
        return self


class Prices(DomainModel):
    """Unit prices in CNY per hour."""

    cpu_core_hour: Price
    memory_gib_hour: Price
    accelerator_hour: dict[Name, Price] = Field(default_factory=dict)
    storage_gib_hour: Price = 0.0


class Site(DomainModel):
    """A data-center site. It is also a node of the network graph, under its own id."""

    id: Name = Field(min_length=1)
    name: Name = ""
    province: Name
    kind: SiteKind
    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)
    capacity: Capacity
    cpu_arch: CpuArch = CpuArch.X86_64
    interconnect: Interconnect = Interconnect.ETHERNET
    prices: Prices
    pue: float = Field(ge=1.0, le=bounds.MAX_PUE, description="Power usage effectiveness.")
    carbon_g_per_kwh: float = Field(
        ge=0,
        le=bounds.MAX_CARBON_G_PER_KWH,
        description="Carbon intensity of the site's electricity.",
    )
    green_share: float = Field(default=0.0, ge=0, le=1)
    labels: dict[Name, Name] = Field(default_factory=dict, max_length=bounds.MAX_LABELS)
    node_pools: tuple[NodePool, ...] = Field(
        default=(),
        max_length=bounds.MAX_NODE_POOLS,
        description="The site's nodes, as pools of one shape each; none: the site is known "
        "only by its capacity, and any request within it fits.",
    )

    @field_validator("node_pools")
    @classmethod
    def _pool_names_unique(cls, pools: tuple[NodePool, ...]) -> tuple[NodePool, ...]:
        names = [pool.name for pool in pools]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"pool names appear more than once: {twice}")
        return pools

    execution: BackendRef = Field(
        default=SIMULATOR,
        description="The site's cluster scheduler, where placed jobs run: a Slurm REST URL "
        "with its user and where its token is, or a simulator (the default) for a site "
        "without a real one.",
    )
