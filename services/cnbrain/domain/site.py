"""Data-center sites: capacity vector, prices, energy, labels and the cluster scheduler."""

from pydantic import Field

from cnbrain.domain.enums import CpuArch, Interconnect, SiteKind
from cnbrain.domain.model import DomainModel
from cnbrain.execution.config import BackendRef

SIMULATOR = BackendRef(kind="simulator")
"""The backend of a site that names none: a simulator (see docs/execution.md)."""


class Capacity(DomainModel):
    """A capacity vector. Accelerators are counted per model name from the catalog."""

    cpu_cores: float = Field(ge=0)
    memory_gib: float = Field(ge=0)
    accelerators: dict[str, int] = Field(default_factory=dict)
    storage_gib: float = Field(default=0.0, ge=0)


class Prices(DomainModel):
    """Unit prices in CNY per hour."""

    cpu_core_hour: float = Field(ge=0)
    memory_gib_hour: float = Field(ge=0)
    accelerator_hour: dict[str, float] = Field(default_factory=dict)
    storage_gib_hour: float = Field(default=0.0, ge=0)


class Site(DomainModel):
    """A data-center site. It is also a node of the network graph, under its own id."""

    id: str = Field(min_length=1)
    name: str = ""
    province: str
    kind: SiteKind
    lat: float = Field(ge=-90, le=90)
    lon: float = Field(ge=-180, le=180)
    capacity: Capacity
    cpu_arch: CpuArch = CpuArch.X86_64
    interconnect: Interconnect = Interconnect.ETHERNET
    prices: Prices
    pue: float = Field(ge=1.0, description="Power usage effectiveness.")
    carbon_g_per_kwh: float = Field(ge=0, description="Carbon intensity of the site's electricity.")
    green_share: float = Field(default=0.0, ge=0, le=1)
    labels: dict[str, str] = Field(default_factory=dict)
    execution: BackendRef = Field(
        default=SIMULATOR,
        description="The site's cluster scheduler, where placed jobs run: a Slurm REST URL "
        "with its user and where its token is, or a simulator (the default) for a site "
        "without a real one.",
    )
