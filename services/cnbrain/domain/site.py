"""Data-center sites: capacity vector, prices, energy, labels and the cluster scheduler."""

from typing import Annotated

from pydantic import Field

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
    execution: BackendRef = Field(
        default=SIMULATOR,
        description="The site's cluster scheduler, where placed jobs run: a Slurm REST URL "
        "with its user and where its token is, or a simulator (the default) for a site "
        "without a real one.",
    )
